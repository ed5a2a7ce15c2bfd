"""The callbacks server's bookkeeping (tinyloop.callbacks.server), on a virtual clock and a scripted selector.

Real socket pairs carry the bytes; the fake selector says when they are
ready, so each test can look at the registrations between two iterations:
read interest while the connection wants input, write interest only while
output waits, neither once it is closed, and the idle timer.
"""

from __future__ import annotations

import errno
import selectors
import socket

import pytest
from fakes import FakeSelector, VirtualClock

from tinyloop.callbacks.loop import Loop
from tinyloop.callbacks.server import Client, HTTPServer
from tinyloop.http import HELLO
from tinyloop.raw.accept import ACCEPT_RETRY_DELAY
from tinyloop.raw.connection import HIGH_WATER

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
REQUEST = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


@pytest.fixture
def env():
    clock = VirtualClock()
    selector = FakeSelector(clock)
    loop = Loop(selector=selector, clock=clock)
    listener = socket.socket()
    server = HTTPServer(loop, listener, idle_timeout=10)
    peers: list[socket.socket] = []

    def connect() -> tuple[Client, socket.socket]:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        peers.append(theirs)
        client = Client(server, ours)
        server.clients.add(client)
        return client, theirs

    yield loop, selector, server, connect
    server.close()
    loop.close()
    listener.close()
    for peer in peers:
        peer.close()


def test_a_new_client_waits_to_read_and_not_to_write(env) -> None:
    loop, selector, server, connect = env
    client, _ = connect()
    assert selector.get_key(client.conn.fd).events == READ
    assert client.reading and not client.writing


def test_a_request_is_answered_without_asking_for_writability(env) -> None:
    loop, selector, server, connect = env
    client, peer = connect()
    peer.sendall(REQUEST)
    selector.set_ready(client.conn.fd, READ, once=True)
    loop.run_once()
    assert peer.recv(65536).endswith(HELLO)
    assert selector.get_key(client.conn.fd).events == READ  # the optimistic send took it all


def test_interest_follows_what_the_connection_wants(env) -> None:
    loop, selector, server, connect = env
    client, _ = connect()
    fd = client.conn.fd
    client.conn.outgoing += b"x" * 10        # output waits: ask for writability too
    client._update()
    assert selector.get_key(fd).events == READ | WRITE
    client.conn.outgoing += b"x" * HIGH_WATER  # above the high-water mark: stop reading
    client._update()
    assert selector.get_key(fd).events == WRITE
    client.conn.outgoing.clear()              # all sent: read again, stop asking to write
    client._update()
    assert selector.get_key(fd).events == READ


def test_waiting_output_is_sent_when_writable_and_write_interest_ends(env) -> None:
    loop, selector, server, connect = env
    client, peer = connect()
    client.conn.outgoing += b"pending output"
    client._update()
    selector.set_ready(client.conn.fd, WRITE)
    loop.run_once()
    assert peer.recv(100) == b"pending output"
    assert selector.get_key(client.conn.fd).events == READ


def test_a_client_above_the_high_water_mark_is_not_read(env) -> None:
    loop, selector, server, connect = env
    client, peer = connect()
    client.conn.outgoing += b"x" * (HIGH_WATER + 1)
    client._update()
    peer.sendall(REQUEST)
    selector.set_ready(client.conn.fd, READ)  # readable, but nobody listens for it
    loop.call_soon(lambda: None)
    loop.run_once()
    assert client.conn.http.requests_served == 0


def test_a_closed_connection_leaves_the_selector_before_its_socket_closes(env) -> None:
    loop, selector, server, connect = env
    client, peer = connect()
    fd = client.conn.fd
    peer.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    selector.set_ready(fd, READ, once=True)
    loop.run_once()
    assert not selector.is_registered(fd)
    assert client.conn.sock.fileno() == -1
    assert client not in server.clients
    assert peer.recv(65536).endswith(HELLO)


def test_server_close_closes_every_client(env) -> None:
    loop, selector, server, connect = env
    clients = [connect()[0] for _ in range(3)]
    server.close()
    assert server.clients == set()
    assert all(client.conn.sock.fileno() == -1 for client in clients)


def test_an_idle_client_is_dropped_and_an_active_one_kept(env) -> None:
    loop, selector, server, connect = env
    idle, _ = connect()
    active, peer = connect()
    loop.call_later(6, lambda: (peer.sendall(REQUEST), selector.set_ready(active.conn.fd, READ, once=True)))
    loop.run_once()  # sleeps until 6 s: the request is sent
    loop.run_once()  # the active client reads it
    loop.run_once()  # sleeps until 10 s: both idle timers fire
    assert loop.time() == pytest.approx(10)
    assert idle not in server.clients and idle.conn.sock.fileno() == -1
    assert active in server.clients  # active at 6 s: its timer was re-armed for 16 s
    loop.run_once()
    assert loop.time() == pytest.approx(16)
    assert active not in server.clients


class ScriptedListener:
    """A listening socket's stand-in whose accept() raises what the test scripts."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.errors: list[OSError] = []
        self.accepts = 0

    def fileno(self) -> int:
        return self.fd

    def setblocking(self, flag: bool) -> None:
        pass

    def accept(self):
        self.accepts += 1
        raise self.errors.pop(0) if self.errors else BlockingIOError(errno.EAGAIN, "empty")


def test_out_of_descriptors_the_listener_rests_then_returns(capsys) -> None:
    # asyncio's remedy, step by step on the virtual clock: EMFILE takes the
    # listener out of the selector, a timer ACCEPT_RETRY_DELAY later puts it
    # back, and the episode is logged once.
    clock = VirtualClock()
    selector = FakeSelector(clock)
    loop = Loop(selector=selector, clock=clock)
    a, b = socket.socketpair()  # a real descriptor number for the stand-in
    listener = ScriptedListener(a.fileno())
    server = HTTPServer(loop, listener)
    try:
        server.start()
        listener.errors = [OSError(errno.EMFILE, "Too many open files")]
        selector.set_ready(listener, READ)  # queued connections: readable, and stays so
        loop.run_once()
        assert not selector.is_registered(listener), "the listener must leave the selector"
        loop.run_once()                     # nothing else to do: sleeps until the retry timer
        assert clock() == pytest.approx(ACCEPT_RETRY_DELAY)
        assert selector.is_registered(listener, READ)
        listener.errors = [OSError(errno.EMFILE, "Too many open files")]
        loop.run_once()                     # still full: rests again, without a new log line
        assert not selector.is_registered(listener) and listener.accepts == 2
        loop.run_once()
        loop.run_once()                     # room now: accepts until EAGAIN, and says so
        assert selector.is_registered(listener, READ) and listener.accepts == 3
        log = capsys.readouterr().err.splitlines()
        assert [line.split(": ", 2)[2].split(";")[0] for line in log] == [
            "accept failed (Too many open files)",
            "accepting connections again"]
    finally:
        server.close()
        loop.close()
        a.close()
        b.close()
