"""What is particular to the kqueue server (the HTTP behaviour it shares with
every stage is tested in test_servers.py).

It says which kqueue it runs on; it keeps a connection's two filters in
step with what the connection wants, with no redundant changes; and write
interest is off unless output waits, so idle keep-alive connections cost
no CPU.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass

import pytest

from tinyloop.http import HELLO
from tinyloop.raw import kqueue_server
from tinyloop.testing import ServerProcess, http_get, recv_response

TIMEOUT = 5.0
api = kqueue_server.api


@pytest.fixture(scope="module")
def server():
    with ServerProcess("kqueue") as proc:
        yield proc


def test_says_which_kqueue_it_uses(server):
    expected = "native kqueue" if hasattr(select, "kqueue") else "kqueue emulated on epoll"
    deadline = time.monotonic() + TIMEOUT  # logged by serve(), just after the port is announced
    while not any(expected in line for line in server.stderr_lines) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert any(expected in line for line in server.stderr_lines), server.stderr_lines


@dataclass
class FakeConnection:
    fd: int
    wants_read: bool = True
    wants_write: bool = False


def changes(conn, enabled):
    return [(e.ident, e.filter, e.flags) for e in kqueue_server.interest_changes(conn, enabled)]


def test_no_change_when_the_filters_already_match():
    conn = FakeConnection(7)
    enabled = {7: (True, False)}
    assert changes(conn, enabled) == []
    assert enabled == {7: (True, False)}


def test_output_waiting_enables_the_write_filter_and_sent_disables_it():
    conn = FakeConnection(7, wants_write=True)
    enabled = {7: (True, False)}
    assert changes(conn, enabled) == [(7, api.KQ_FILTER_WRITE, api.KQ_EV_ENABLE)]
    assert enabled[7] == (True, True)
    assert changes(conn, enabled) == []  # already asked for: not again
    conn.wants_write = False
    assert changes(conn, enabled) == [(7, api.KQ_FILTER_WRITE, api.KQ_EV_DISABLE)]
    assert enabled[7] == (True, False)


def test_backpressure_switches_both_filters_at_once():
    conn = FakeConnection(9, wants_read=False, wants_write=True)
    enabled = {9: (True, False)}
    assert sorted(changes(conn, enabled)) == sorted([(9, api.KQ_FILTER_READ, api.KQ_EV_DISABLE),
                                                     (9, api.KQ_FILTER_WRITE, api.KQ_EV_ENABLE)])
    assert enabled[9] == (False, True)
    conn.wants_read, conn.wants_write = True, False
    assert sorted(changes(conn, enabled)) == sorted([(9, api.KQ_FILTER_READ, api.KQ_EV_ENABLE),
                                                     (9, api.KQ_FILTER_WRITE, api.KQ_EV_DISABLE)])


def idle_cpu(server, seconds=0.6):
    """CPU seconds the server uses while nobody sends it anything for ``seconds``."""
    time.sleep(0.1)  # let it finish what it was doing
    before = server.cpu_seconds()
    time.sleep(seconds)
    return server.cpu_seconds() - before


@pytest.mark.alone  # a CPU-time threshold: run without a neighbour
def test_idle_keep_alive_connections_cost_no_cpu(server):
    # Each client asks for an 8 MiB echo and waits before reading it, so the
    # server's send buffer (at most 4 MiB by default, see tcp(7) tcp_wmem)
    # fills and it must enable the WRITE filter to finish.
    # Once every response is sent, write interest must be off again: a
    # level-triggered WRITE filter left on a writable socket is a busy loop.
    body = b"x" * (8 * 1024 * 1024)
    request = b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    conns = [server.connect(TIMEOUT) for _ in range(2)]
    try:
        for sock in conns:
            sock.sendall(request)
        time.sleep(0.2)
        for sock in conns:
            assert recv_response(sock)[::2] == (200, body)
        assert idle_cpu(server) < 0.2
    finally:
        for sock in conns:
            sock.close()


def test_a_connection_reset_while_writing_leaves_no_write_interest_behind(server):
    # The client asks for a large echo, reads nothing, then resets: the
    # server closes the connection while its WRITE filter is enabled.  The
    # descriptor number is reused by the next accept; nothing of the old
    # registration may reach the new connection, nor keep the loop busy.
    for _ in range(3):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(TIMEOUT)
            sock.connect(server.address)
            body = b"x" * (1024 * 1024)
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            time.sleep(0.1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for _ in range(5):
            assert http_get(server.address, timeout=TIMEOUT) == (200, HELLO)
    assert idle_cpu(server) < 0.2
