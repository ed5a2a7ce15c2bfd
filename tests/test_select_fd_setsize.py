"""select(2) meets FD_SETSIZE: the select server refuses what it cannot watch.

An fd_set holds descriptors 0 to 1023 only.  We open real loopback
connections until the server's descriptors pass that, then check that it
refused the ones past the limit with a log line, kept serving the ones below,
and serves new clients again once old ones leave.  About 1,050 connections,
a second or two.
"""

from __future__ import annotations

import re
import resource
import socket
import time
from collections.abc import Iterator

import pytest

from tinyloop.testing import ServerProcess, recv_response

FD_SETSIZE = 1024
TIMEOUT = 5.0
EXTRA = 24  # connections opened past the server's first descriptor >= FD_SETSIZE
REFUSED = re.compile(r"select: refusing a connection: descriptor (\d+) >= FD_SETSIZE \(1024\)")
GET = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


@pytest.fixture
def enough_descriptors() -> Iterator[None]:
    """Raise this process's soft RLIMIT_NOFILE so that it, and the server it starts
    (a child inherits its limits, see getrlimit(2)), can open FD_SETSIZE + 200 files."""
    need = FD_SETSIZE + 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def refusals(server: ServerProcess) -> list[int]:
    return [int(m.group(1)) for line in server.stderr_lines if (m := REFUSED.search(line))]


def wait_until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def ask(sock: socket.socket) -> int:
    sock.sendall(GET)
    return recv_response(sock)[0]


def test_select_server_refuses_descriptors_past_fd_setsize(enough_descriptors: None) -> None:
    clients: list[socket.socket] = []
    with ServerProcess("select") as server:
        try:
            # The server holds fd_count() descriptors, numbered from 0; each
            # connection it accepts takes the lowest free number.
            room = FD_SETSIZE - server.fd_count()
            for _ in range(room + EXTRA):
                clients.append(server.connect(TIMEOUT))
            assert wait_until(lambda: len(refusals(server)) >= EXTRA), (
                f"expected {EXTRA} refusals in the server's log, got: "
                + "".join(server.stderr_lines[-5:]))
            assert min(refusals(server)) >= FD_SETSIZE

            # The refused clients were closed; the others are still served.
            last = clients.pop()
            last.settimeout(TIMEOUT)
            try:
                assert last.recv(1) == b"", "a refused connection should see end of stream"
            except ConnectionResetError:
                pass
            finally:
                last.close()
            assert ask(clients[0]) == 200
            assert ask(clients[room // 2]) == 200

            # When old clients leave, their descriptors (below 1024) are reused.
            for sock in clients[:10]:
                sock.close()
            del clients[:10]
            before = len(refusals(server))
            assert wait_until(lambda: server.fd_count() < FD_SETSIZE - 5)
            with server.connect(TIMEOUT) as fresh:
                assert ask(fresh) == 200
            assert len(refusals(server)) == before
        finally:
            for sock in clients:
                sock.close()
        assert server.stop() == 0
