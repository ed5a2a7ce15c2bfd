"""The C floors (benchmarks/peers/c): c-epoll and c-uring answer HTTP alike, and echo alike.

The two floors share their HTTP (http_answer.h) and differ in how bytes come
in and go out: epoll(7) readiness with recv and send, or io_uring(7)
completions with multishot accept and receive on provided buffers.  Each
floor gets one server process for this module, built as the benchmarks build
it (``benchmarks.servers.prepare``), and the tests talk to it over loopback
as tests/test_servers.py talks to the stages: the answers, keep-alive by
RFC 9112 section 9.3, pipelining, bad input, a client that never reads, and
a clean stop on SIGTERM; c-uring once more with an SQ poll thread
(TINYLOOP_SQPOLL: the thread is there, in the process, only when asked for, and
a bad idle time is refused); and the echo floors (benchmarks/echo.py's c-epoll
and c-uring): every byte back in order, EOF, backpressure.  A floor that
cannot build or run here (no C
compiler, no liburing, io_uring disabled) is skipped, saying why, and so is
the other io_uring peer, uringcore, where it cannot run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import servers
from tinyloop.http import HELLO
from tinyloop.serving import listen
from tinyloop.testing import ServerProcess, http_get, recv_response

# The stages' suite's helpers, and the tests whose requests the floors answer as the stages do.
from test_servers import get, read_until_eof, reset, wait_for_fds  # tests/ is on sys.path
from test_servers import test_a_client_that_never_reads_is_held_back  # noqa: F401  (collected here too)
from test_servers import test_keep_alive_http10_as_ab_sends_it  # noqa: F401

# c-uring-sqpoll: the c-uring binary with an SQ poll thread (TINYLOOP_SQPOLL), which benchmarks/completion.py
# measures against it; it must answer every test as the others do.
FLOORS = ["c-epoll", "c-uring", "c-uring-sqpoll"]
TIMEOUT = 5.0   # seconds any one socket operation may take before the test fails
NOT_FOUND = b"Not Found\n"
# The answer to get() below, byte for byte (http_answer.h's respond()).
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s"
          % (len(HELLO), HELLO))


def _floor(name: str) -> servers.Server:
    from benchmarks import completion
    server = completion.sqpoll_server() if name == "c-uring-sqpoll" else servers.peer_server(name)
    if note := servers.prepare(server):
        pytest.skip(f"{name}: {note}")
    return server


@pytest.fixture(scope="module", params=FLOORS)
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    server = _floor(request.param)
    with ServerProcess(server.name, command=list(server.argv), env=server.env) as proc:
        yield proc


def _thread_names(pid: int) -> list[str]:
    return sorted(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() for tid in os.listdir(f"/proc/{pid}/task"))


def test_sqpoll_runs_an_sq_poll_thread_in_the_process_and_only_when_asked(server: ServerProcess) -> None:
    if server.stage == "c-epoll":
        pytest.skip("epoll has no ring")
    assert http_get(server.address, "/") == (200, HELLO)
    polling = [name for name in _thread_names(server.pid) if name.startswith("iou-sqp")]
    # At least one: a clean-clone run under load once listed two iou-sqp
    # threads for the one ring (not understood; the kernel names them).
    if server.stage == "c-uring-sqpoll":
        assert polling, _thread_names(server.pid)
    else:
        assert not polling, _thread_names(server.pid)


def test_sqpoll_refuses_a_bad_idle_time_in_one_line() -> None:
    floor = _floor("c-uring")
    done = subprocess.run(list(floor.argv), env={**os.environ, "TINYLOOP_SQPOLL": "soon"},
                          capture_output=True, text=True, timeout=10)
    assert done.returncode == 1
    assert done.stderr.strip() == "tinyloop: c-uring: TINYLOOP_SQPOLL must be milliseconds, 0 to 60000"


# --- the answers ----------------------------------------------------------------

def test_get_root_is_hello_and_anything_else_404(server: ServerProcess) -> None:
    assert http_get(server.address, "/") == (200, HELLO)
    assert http_get(server.address, "/nowhere") == (404, NOT_FOUND)
    with server.connect(TIMEOUT) as sock:
        sock.sendall(b"HEAD / HTTP/1.1\r\nHost: test\r\n\r\n")
        assert recv_response(sock)[0] == 404   # only GET / is served


def test_keep_alive_http11(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        buffer = bytearray()
        for path, status in [("/", 200), ("/x", 404), ("/", 200), ("/", 200)]:
            sock.sendall(get(path))
            got, headers, _ = recv_response(sock, buffer)
            assert got == status
            assert b"connection" not in headers   # HTTP/1.1 stays open without saying so


def test_http10_without_keep_alive_and_connection_close_close(server: ServerProcess) -> None:
    for request in (get(version="1.0"), get(extra="Connection: close\r\n")):
        with server.connect(TIMEOUT) as sock:
            sock.sendall(request)
            data = read_until_eof(sock)   # the server closes after one response
        assert data.split(b" ")[1] == b"200" and data.endswith(HELLO)
        assert b"\r\nConnection: close\r\n" in data


def test_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    paths = ["/", "/a", "/", "/b"] * 6   # 24 requests, as wrk's depth-24 load sends them
    with server.connect(TIMEOUT) as sock:
        sock.sendall(b"".join(get(path) for path in paths) + get(extra="Connection: close\r\n"))
        buffer = bytearray()
        answers = [recv_response(sock, buffer)[::2] for _ in range(len(paths) + 1)]
        assert not buffer and sock.recv(1) == b""   # nothing more, then the close
    assert answers == [(200, HELLO) if path == "/" else (404, NOT_FOUND) for path in paths] + [(200, HELLO)]


def test_a_request_in_pieces_is_answered_once_whole(server: ServerProcess) -> None:
    request = get(extra="User-Agent: trickle\r\n")
    with server.connect(TIMEOUT) as sock:
        for start in range(0, len(request), 7):
            sock.sendall(request[start:start + 7])
            time.sleep(0.005)   # each piece its own receive
        assert recv_response(sock)[::2] == (200, HELLO)


def test_half_close_after_the_requests_still_gets_every_response(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(get() * 3 + b"GET / HTTP/1.1\r\nHost: ha")   # and half of a fourth
        sock.shutdown(socket.SHUT_WR)
        data = read_until_eof(sock)   # then the server closes: a half request gets no answer
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 3 and data.endswith(HELLO)


# --- bad input --------------------------------------------------------------------

@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"THIS IS NOT HTTP\r\n\r\n", 400),
    (b"GET / HTTP/2.0\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 501),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
    # A head that fills the floors' 8 KiB input with no end in sight (exactly: bytes the
    # server never reads would make its close a reset, and the answer could be lost).
    (b"GET / HTTP/1.1\r\nX-Big: ".ljust(8192, b"a"), 431),
])
def test_bad_input_gets_its_status_and_close_and_the_server_goes_on(
        server: ServerProcess, request_bytes: bytes, status: int) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(request_bytes)
        data = read_until_eof(sock)
    assert data.startswith(b"HTTP/1.1 %d " % status)
    assert b"\r\nConnection: close\r\n" in data
    assert http_get(server.address) == (200, HELLO)


def test_after_backpressure_every_request_is_answered_once_and_in_order(server: ServerProcess) -> None:
    # 20,000 pipelined requests, whose answers (1.7 MB) are more than the socket
    # buffers hold: the server must stop reading while the client does not read
    # (c-uring cancels its armed receive and holds what it has), then take up
    # where it stopped, losing nothing and answering nothing twice.
    count = 20_000
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024)
        client.settimeout(TIMEOUT)
        client.connect(server.address)
        sender = threading.Thread(target=client.sendall, args=(get() * count,))
        sender.start()
        time.sleep(0.5)   # the answers pile up, and the server stops reading
        assert http_get(server.address) == (200, HELLO)   # others are served meanwhile
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)   # a window that opens at once
        data = bytearray()
        while len(data) < count * len(ANSWER):
            data += client.recv(1 << 20) or b"EOF"
        sender.join(TIMEOUT)
    assert data == ANSWER * count, f"{len(data)} bytes, not {count} answers"


def test_resets_and_many_connections_leak_no_descriptors(server: ServerProcess) -> None:
    http_get(server.address)
    before = wait_for_fds(server, 0, timeout=0.3)
    for _ in range(20):
        sock = server.connect(TIMEOUT)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: half")
        time.sleep(0.01)
        reset(sock)
    for _ in range(300):
        assert http_get(server.address) == (200, HELLO)
    after = wait_for_fds(server, before)
    assert after <= before, f"descriptors grew from {before} to {after}"


def test_sigterm_stops_with_clients_in_every_state_and_frees_the_port(server: ServerProcess) -> None:
    # A server of its own, stopped while one client is idle between requests,
    # one is half-way through a request, and one pipelines without reading.
    with ServerProcess(server.stage, command=server.command, env=_floor(server.stage).env) as proc:
        clients = [proc.connect(TIMEOUT) for _ in range(3)]
        clients[0].sendall(get())
        assert recv_response(clients[0])[::2] == (200, HELLO)
        clients[1].sendall(b"GET / HTTP/1.1\r\nHost: ha")
        clients[2].setblocking(False)
        with contextlib.suppress(BlockingIOError):
            clients[2].send(get() * 5000)
        time.sleep(0.2)
        started = time.monotonic()
        code = proc.stop()
        assert (code, time.monotonic() - started < 3.0) == (0, True), "".join(proc.stderr_lines)
        assert any(f"{server.stage}: stopped (3 connections open)" in line for line in proc.stderr_lines), (
            "".join(proc.stderr_lines[-5:]) or "no output")
        for client in clients:
            client.close()
        listen("127.0.0.1", proc.port).close()   # would raise EADDRINUSE if still held


# --- where the io_uring peers cannot run -------------------------------------------

def test_c_uring_says_why_it_cannot_run_where_io_uring_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinyloop.raw import uring
    why = "io_uring is disabled on this machine (/proc/sys/kernel/io_uring_disabled is 2)"
    monkeypatch.setattr(uring, "unavailable", lambda: why)
    assert servers.prepare(servers.peer_server("c-uring")) == why
    assert servers.prepare(servers.peer_server("c-epoll")) in (None, "cc is not on PATH")


def test_c_uring_says_why_it_cannot_build_without_liburing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinyloop.raw import uring
    monkeypatch.setattr(uring, "unavailable", lambda: None)
    monkeypatch.setenv("CC", "false")   # a compiler that finds no header
    assert servers.uring_note() == "liburing is not installed (Debian: liburing-dev)"


def test_uringcore_peer_runs_our_handler_or_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    # uringcore (PyPI, an asyncio loop on io_uring) is a peer to measure: the asyncio peers'
    # script must start it as it starts uvloop and rloop (it has no new_event_loop(), only a
    # policy), and where io_uring is refused its rows are skipped, saying why.
    from tinyloop.raw import uring
    peer = servers.peer_server("uringcore-protocol")
    if note := servers.prepare(peer):
        pytest.skip(note)
    with ServerProcess(peer.name, command=list(peer.argv)) as proc:
        assert http_get(proc.address) == (200, HELLO)
        assert proc.stop() == 0, "".join(proc.stderr_lines)
    why = "io_uring is disabled on this machine (/proc/sys/kernel/io_uring_disabled is 2)"
    monkeypatch.setattr(uring, "unavailable", lambda: why)
    assert servers.prepare(peer) == why


# --- the echo floors ------------------------------------------------------------------

@pytest.fixture(scope="module", params=["c-epoll", "c-uring"])
def echo_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    from benchmarks import echo
    peer = echo._PEERS[request.param]
    if note := servers.prepare(peer):
        pytest.skip(f"echo {peer.name}: {note}")
    with ServerProcess(peer.name, command=list(peer.argv)) as proc:
        yield proc


def _echo(sock: socket.socket, message: bytes) -> bytes:
    """Send ``message`` while reading its echo (a thread sends, so neither side's buffers fill)."""
    sender = threading.Thread(target=sock.sendall, args=(message,))
    sender.start()
    data = bytearray()
    while len(data) < len(message) and (chunk := sock.recv(1 << 20)):
        data += chunk
    sender.join(TIMEOUT)
    return bytes(data)


def test_echo_sends_every_byte_back_in_order(echo_server: ServerProcess) -> None:
    with echo_server.connect(TIMEOUT) as sock:
        for size in (1, 1024, 100 * 1024, 3 * 1024 * 1024):   # up to many of its buffers at once
            message = bytes(i * 7 % 251 for i in range(size))
            assert _echo(sock, message) == message, size


def test_echo_ends_a_connection_at_eof_after_echoing_what_came_before(echo_server: ServerProcess) -> None:
    with echo_server.connect(TIMEOUT) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert read_until_eof(sock) == b"last words"


def test_echo_holds_back_a_client_that_never_reads(echo_server: ServerProcess) -> None:
    limit = 256 * 1024 * 1024
    memory = echo_server.rss_bytes()
    with socket.socket() as flooder:
        flooder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024)
        flooder.settimeout(TIMEOUT)
        flooder.connect(echo_server.address)
        flooder.setblocking(False)
        sent, block = 0, b"x" * 65536
        deadline = time.monotonic() + 10
        while sent < limit and time.monotonic() < deadline:
            try:
                sent += flooder.send(block)
            except BlockingIOError:
                time.sleep(0.1)   # full: make sure it stays full (the server has stopped reading)
                try:
                    sent += flooder.send(block)
                except BlockingIOError:
                    break
        assert sent < limit and time.monotonic() < deadline, f"the server took {sent} bytes from a client that reads nothing"
        assert echo_server.rss_bytes() - memory < 32 * 1024 * 1024
        with echo_server.connect(TIMEOUT) as other:   # others are served meanwhile
            assert _echo(other, b"still here") == b"still here"
        reset(flooder)
