"""One HTTP conformance suite, run against every stage's server.

Each stage in ``tinyloop.stages.STAGES`` gets one server process for this
module (started by ``python -m tinyloop serve STAGE --port 0``) and every
test below talks to it over loopback: requests of every shape, clients that
trickle, pipeline, reset, flood or never read, and a clean stop on SIGTERM.
The tests check behaviour, never speed.  Every socket operation has a
timeout, so a server that hangs fails a test instead of hanging the suite.
Each test closes its connections before it returns: the ``blocking`` server
serves one client at a time, and a connection left open would hold up the
next test.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from tinyloop.http import HELLO
from tinyloop.serving import listen
from tinyloop.testing import ServerProcess, http_get, recv_response

from conftest import stage_params  # noqa: E402  (tests/ is on sys.path)

# Every stage; one whose module does not import here (Part IV without libuv)
# is skipped with the message that says what to install.
STAGE_PARAMS = stage_params()
TIMEOUT = 5.0  # seconds any one socket operation may take before the test fails
# How much a server's resident memory may grow while a client floods it with
# requests and reads nothing: the high-water mark (256 KiB), one read's
# worth of answers past it, and room for the allocator's own slack.
MEMORY_BOUND = 16 * 1024 * 1024


@pytest.fixture(scope="module", params=STAGE_PARAMS)
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    with ServerProcess(request.param) as proc:
        yield proc


def get(path: str = "/", *, version: str = "1.1", extra: str = "") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: test\r\n{extra}\r\n".encode()


def post(body: bytes, *, extra: str = "") -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body), extra.encode(), body)


def read_until_eof(sock: socket.socket) -> bytes:
    data = bytearray()
    while chunk := sock.recv(65536):
        data += chunk
    return bytes(data)


def reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN (SO_LINGER with a zero timeout, see socket(7))."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def wait_for_fds(server: ServerProcess, at_most: int, timeout: float = 3.0) -> int:
    """The server's descriptor count, once it is ``at_most`` or the timeout passes."""
    deadline = time.monotonic() + timeout
    while (count := server.fd_count()) > at_most and time.monotonic() < deadline:
        time.sleep(0.02)
    return count


# --- requests of every shape -------------------------------------------------

def test_get(server: ServerProcess) -> None:
    assert http_get(server.address, "/") == (200, HELLO)


def test_unknown_path_is_404(server: ServerProcess) -> None:
    assert http_get(server.address, "/nowhere")[0] == 404


def test_head_has_no_body(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(b"HEAD / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        data = read_until_eof(sock)
    head, sep, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nContent-Length: %d" % len(HELLO) in head
    assert sep and body == b""


def test_post_echo_content_length(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(post(b"hello, echo"))
        status, _, body = recv_response(sock)
    assert (status, body) == (200, b"hello, echo")


def test_post_echo_chunked(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n7\r\n, chunk\r\n0\r\n\r\n")
        status, _, body = recv_response(sock)
    assert (status, body) == (200, b"hello, chunk")


def test_keep_alive_http11(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        buffer = bytearray()
        for i in range(5):
            sock.sendall(post(b"request %d" % i))
            status, headers, body = recv_response(sock, buffer)
            assert (status, body) == (200, b"request %d" % i)
            assert headers.get(b"connection") != b"close"


def test_keep_alive_http10_as_ab_sends_it(server: ServerProcess) -> None:
    # ApacheBench's -k: HTTP/1.0 asking to keep the connection open.
    request = get(version="1.0", extra="Connection: Keep-Alive\r\nUser-Agent: ApacheBench/2.3\r\n")
    with server.connect(TIMEOUT) as sock:
        buffer = bytearray()
        for _ in range(3):
            sock.sendall(request)
            status, headers, body = recv_response(sock, buffer)
            assert (status, body) == (200, HELLO)
            assert headers[b"connection"].lower() == b"keep-alive"


def test_http10_without_keep_alive_closes(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(get(version="1.0"))
        data = read_until_eof(sock)  # the server closes after one response
    assert data.split(b"\r\n")[0].split(b" ")[1] == b"200" and data.endswith(HELLO)


def test_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    bodies = [b"first", b"second" * 100, b"", b"fourth"]
    batch = b"".join(post(body) for body in bodies) + get() + get("/nowhere")
    with server.connect(TIMEOUT) as sock:
        sock.sendall(batch)  # one send: the server finds six requests in one read
        buffer = bytearray()
        answers = [recv_response(sock, buffer) for _ in range(6)]
    assert [(status, body) for status, _, body in answers] == (
        [(200, body) for body in bodies] + [(200, HELLO), (404, b"Not Found\n")])


def test_body_split_over_many_small_packets(server: ServerProcess) -> None:
    body = bytes(range(256)) * 2
    request = post(body)
    with server.connect(TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each send its own segment
        for start in range(0, len(request), 13):
            sock.sendall(request[start:start + 13])
            time.sleep(0.001)
        status, _, echoed = recv_response(sock)
    assert (status, echoed) == (200, body)


def test_large_upload_and_download(server: ServerProcess) -> None:
    # 8 MiB each way.  Linux lets a loopback socket's send buffer grow to
    # 4 MiB (net.ipv4.tcp_wmem), so a smaller response could leave in one
    # send(); this one cannot, while the client waits before reading with a
    # small receive buffer.  The server must keep what the kernel did not
    # take (partial writes).  The upload arrives faster than one read takes
    # it, so an edge-triggered server must read until EAGAIN.
    body = bytes(range(256)) * (8 * 4096)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.settimeout(TIMEOUT)
        sock.connect(server.address)
        sock.sendall(post(body))
        time.sleep(0.2)
        status, _, echoed = recv_response(sock)
    assert status == 200 and echoed == body


def test_half_close_after_the_requests_still_gets_every_response(server: ServerProcess) -> None:
    # The client sends two requests, then shutdown(SHUT_WR): end of stream on
    # the server's side, while the client still reads.  A 1 MiB echo cannot
    # leave in one send to a small receive buffer, so the server must finish
    # writing after it has read EOF, and close only then.
    body = bytes(range(256)) * 4096
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.settimeout(TIMEOUT)
        sock.connect(server.address)
        sock.sendall(post(body) + get())
        sock.shutdown(socket.SHUT_WR)
        time.sleep(0.2)  # the server reads EOF long before the client reads
        buffer = bytearray(read_until_eof(sock))
    first, second = recv_response(FakeSocket(), buffer), recv_response(FakeSocket(), buffer)
    assert (first[0], first[2]) == (200, body)
    assert (second[0], second[2]) == (200, HELLO)
    assert not buffer


class FakeSocket:
    """A socket that has nothing more to give: recv_response then parses its buffer alone."""

    def recv(self, size: int) -> bytes:
        return b""


# --- bad input and bad peers -------------------------------------------------

def test_malformed_request_gets_400_and_server_goes_on(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        data = read_until_eof(sock)
    assert data.startswith(b"HTTP/1.1 400 ")
    assert b"\r\nConnection: close\r\n" in data
    assert http_get(server.address) == (200, HELLO)


def test_oversized_header_gets_431(server: ServerProcess) -> None:
    with server.connect(TIMEOUT) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\nX-Big: " + b"a" * (66 * 1024))
        data = read_until_eof(sock)
    assert data.startswith(b"HTTP/1.1 431 ")
    assert http_get(server.address) == (200, HELLO)


def test_reset_in_the_middle_of_a_request(server: ServerProcess) -> None:
    for _ in range(3):
        sock = server.connect(TIMEOUT)
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\nonly part")
        time.sleep(0.05)  # let the server read the part
        reset(sock)
    assert http_get(server.address) == (200, HELLO)


def test_reset_while_the_server_writes(server: ServerProcess) -> None:
    # A big response the client never reads: the server's send fails (EPIPE
    # or ECONNRESET) and only that connection may suffer.
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT)
        sock.connect(server.address)
        sock.sendall(post(b"x" * (1024 * 1024)))
        time.sleep(0.1)
        reset(sock)
    assert http_get(server.address) == (200, HELLO)


def test_a_slow_client_delays_others_only_on_the_blocking_server(server: ServerProcess) -> None:
    # The slow client sends its request one byte per 100 ms.  Every server
    # but one must answer fresh clients in between; the blocking server's
    # lesson is the opposite, and is asserted as such.
    if server.stage == "blocking":
        _assert_everyone_waits_for_the_slow_client(server)
    else:
        _assert_nobody_waits_for_the_slow_client(server)


def _assert_nobody_waits_for_the_slow_client(server: ServerProcess) -> None:
    request = get(extra="X-Slow: yes\r\n")
    with server.connect(TIMEOUT) as slow:
        for i in range(5):
            slow.sendall(request[i:i + 1])
            time.sleep(0.1)
            assert http_get(server.address, timeout=TIMEOUT) == (200, HELLO)
        slow.sendall(request[5:])  # finish quickly now
        status, _, body = recv_response(slow)
        assert (status, body) == (200, HELLO)


def _assert_everyone_waits_for_the_slow_client(server: ServerProcess) -> None:
    # While one client is connected, another is not answered, however small
    # its request.
    request = get(extra="X-Slow: yes\r\n")
    with server.connect(TIMEOUT) as slow:
        slow.sendall(request[:1])
        time.sleep(0.1)  # the server has accepted the slow client by now
        with server.connect(TIMEOUT) as fast:
            fast.sendall(get())
            fast.settimeout(0.5)
            with pytest.raises(TimeoutError):
                fast.recv(1)
            slow.sendall(request[1:])
            assert recv_response(slow)[:3:2] == (200, HELLO)
            slow.close()  # slow leaves: now the server turns to fast
            fast.settimeout(TIMEOUT)
            assert recv_response(fast)[:3:2] == (200, HELLO)


def test_a_client_that_never_reads_is_held_back(server: ServerProcess) -> None:
    # Backpressure.  The flooder pipelines requests and never reads a
    # response.  The server must stop reading it once its answers pile up,
    # so the flooder's own sends soon stop fitting (EAGAIN), instead of the
    # server buffering without bound, and other clients are still served.
    limit = 64 * 1024 * 1024
    chunk = get() * 2000  # 2000 requests, about 56 KB
    memory = server.rss_bytes()
    with socket.socket() as flooder:
        flooder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024)
        flooder.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        flooder.settimeout(TIMEOUT)
        flooder.connect(server.address)
        flooder.setblocking(False)
        sent = 0  # bytes of the endless stream ``chunk chunk chunk ...`` sent so far
        deadline = time.monotonic() + 10
        while sent < limit and time.monotonic() < deadline:
            try:
                sent += flooder.send(chunk[sent % len(chunk):])
            except BlockingIOError:
                # Full: make sure it stays full (the server has stopped reading).
                time.sleep(0.1)
                try:
                    sent += flooder.send(chunk[sent % len(chunk):])
                except BlockingIOError:
                    break
        assert sent < limit and time.monotonic() < deadline, (
            f"the server took {sent} bytes of requests from a client that reads nothing")
        # The high-water mark bounds what the server holds for the flooder:
        # its own buffers stay small, whatever the flooder sent.
        grown = server.rss_bytes() - memory
        assert grown < MEMORY_BOUND, (
            f"the server's memory grew by {grown >> 20} MiB for a client that reads nothing")
        if server.stage != "blocking":  # blocking serves nobody else meanwhile: its lesson
            assert http_get(server.address) == (200, HELLO)
        reset(flooder)
    assert http_get(server.address) == (200, HELLO)


# --- resources and shutdown --------------------------------------------------

def test_a_thousand_connections_leak_no_descriptors(server: ServerProcess) -> None:
    for _ in range(10):
        http_get(server.address)
    before = wait_for_fds(server, 0, timeout=0.3)
    for _ in range(1000):
        assert http_get(server.address) == (200, HELLO)
    after = wait_for_fds(server, before)
    assert after <= before, f"descriptors grew from {before} to {after}"


def test_sigterm_stops_promptly_and_releases_the_port(server: ServerProcess) -> None:
    # A server of its own, stopped with an idle keep-alive client connected.
    with ServerProcess(server.stage) as proc:
        with proc.connect(TIMEOUT) as idle:
            idle.sendall(get())
            assert recv_response(idle)[0] == 200
            started = time.monotonic()
            code = proc.stop()
            elapsed = time.monotonic() - started
        assert code == 0, "".join(proc.stderr_lines)
        assert elapsed < 3.0
        listen("127.0.0.1", proc.port).close()  # would raise EADDRINUSE if still held


def test_threaded_client_threads_block_the_stop_signals() -> None:
    # The kernel gives a process-directed SIGTERM to any thread not blocking it; only the main
    # thread's accept() must be interrupted, so every client thread blocks SIGTERM and SIGINT.
    def blocked(pid: int, tid: str) -> int:
        with open(f"/proc/{pid}/task/{tid}/status") as status:
            line = next(line for line in status if line.startswith("SigBlk:"))
        return int(line.split()[1], 16)

    stop = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGINT - 1))
    with ServerProcess("threaded") as proc:
        with proc.connect(TIMEOUT) as idle:
            idle.sendall(get())
            assert recv_response(idle)[0] == 200
            # The client's thread may answer before the main thread lifts its mask again.
            deadline = time.monotonic() + TIMEOUT
            while (main := blocked(proc.pid, str(proc.pid))) & stop and time.monotonic() < deadline:
                time.sleep(0.01)
            clients = {int(tid): blocked(proc.pid, tid) for tid in os.listdir(f"/proc/{proc.pid}/task")
                       if int(tid) != proc.pid}
    assert not main & stop, "the main thread must take the stop signals"
    assert clients, "the idle client has a thread of its own"
    assert all(mask & stop == stop for mask in clients.values()), f"client threads' SigBlk: {clients}"
