# tests/test_exercise_readiness.py
#
# The readiness chapter's exercises, each behaviour checked on its own and
# said in the exercise's words.  The checker (tinyloop/exercises/checker.py)
# runs these first, before the stages' HTTP suites: a student whose
# on_writable forgets its return reads "on_writable() must return True when
# the kernel took bytes; yours returned None", not a timeout three layers up.
#
# Rules this file keeps:
#   * A test is named test_<exercise with _>_..., which is how the checker
#     selects an exercise's tests (checker.test_arguments).
#   * Every assertion carries a message: what the exercise asks, what was
#     expected, what happened.
#   * Unit tests use a scripted socket; the one test that needs the kernel
#     (a reset peer) talks to 127.0.0.1 and is bounded in time.

from __future__ import annotations

import errno
import socket
import time

import pytest

from tinyloop.raw import connection
from tinyloop.raw.connection import HIGH_WATER, Connection


class ScriptedSocket:
    """A socket whose send() takes what the test says: an int (that many bytes
    at most) or an exception to raise.  It has no sendall(): the exercise says
    not to use it."""

    def __init__(self, *sends: int | BaseException) -> None:
        self.script = list(sends)
        self.sent: list[bytes] = []

    def fileno(self) -> int:
        return 99

    def send(self, data: bytes | bytearray | memoryview) -> int:
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        taken = bytes(data[:step])
        self.sent.append(taken)
        return len(taken)


def conn_with(sock: ScriptedSocket, output: bytes) -> Connection:
    conn = Connection(sock)  # type: ignore[arg-type]
    conn.outgoing += output
    return conn


# --- partial-writes -----------------------------------------------------------

def test_partial_writes_a_partial_send_keeps_the_rest_in_order() -> None:
    conn = conn_with(ScriptedSocket(4), b"HTTP/1.1 200 OK")
    took = conn.on_writable()
    assert conn.outgoing == bytearray(b"/1.1 200 OK"), (
        "after send() took the first 4 bytes, self.outgoing must hold the rest, in order; "
        f"it holds {bytes(conn.outgoing)!r}")
    assert took is True, f"on_writable() must return True when the kernel took bytes; yours returned {took!r}"


def test_partial_writes_one_send_per_call() -> None:
    sock = ScriptedSocket(3, 3)
    conn = conn_with(sock, b"abcdefgh")
    conn.on_writable()
    assert len(sock.sent) == 1, (
        f"on_writable() must call send() once (the server calls it again when the socket "
        f"is writable); yours called it {len(sock.sent)} times")
    assert sock.sent[0] == b"abc", f"send() must be given self.outgoing; it was given {sock.sent[0]!r}"


def test_partial_writes_everything_taken_empties_the_buffer() -> None:
    conn = conn_with(ScriptedSocket(100), b"hello")
    took = conn.on_writable()
    assert conn.outgoing == bytearray(), (
        f"when send() takes every byte, self.outgoing must be empty; it holds {bytes(conn.outgoing)!r}")
    assert took is True, f"on_writable() must return True when the kernel took bytes; yours returned {took!r}"
    assert not conn.failed, "a send that succeeded must not set self.failed"


def test_partial_writes_eagain_keeps_everything_and_returns_false() -> None:
    conn = conn_with(ScriptedSocket(BlockingIOError(errno.EAGAIN, "again")), b"hello")
    took = conn.on_writable()
    assert took is False, (
        f"when send() raises BlockingIOError (EAGAIN), on_writable() must return False; yours returned {took!r}")
    assert conn.outgoing == bytearray(b"hello"), (
        f"on EAGAIN nothing was sent: self.outgoing must still hold every byte; it holds {bytes(conn.outgoing)!r}")
    assert not conn.failed, "EAGAIN is not a failure: self.failed must stay False (wait for write readiness)"


def test_partial_writes_a_send_that_takes_nothing_returns_false() -> None:
    conn = conn_with(ScriptedSocket(0), b"hello")
    took = conn.on_writable()
    assert took is False, (
        f"on_writable() returns True only if the kernel took bytes; send() took 0, yours returned {took!r}")
    assert conn.outgoing == bytearray(b"hello"), "send() took nothing: self.outgoing must be unchanged"


@pytest.mark.parametrize("error", [ConnectionResetError(errno.ECONNRESET, "reset"),
                                   BrokenPipeError(errno.EPIPE, "broken pipe"),
                                   OSError(errno.ETIMEDOUT, "timed out")], ids=["ECONNRESET", "EPIPE", "other"])
def test_partial_writes_a_failed_send_sets_failed(error: OSError) -> None:
    conn = conn_with(ScriptedSocket(error), b"hello")
    took = conn.on_writable()
    assert conn.failed is True, (
        f"after send() raised {type(error).__name__} (the peer will read no more), the connection "
        f"must report failed (self.failed = True); yours left failed={conn.failed!r}")
    assert took is False, f"a failed send() must make on_writable() return False; yours returned {took!r}"
    assert conn.done, "a failed connection must be done, so that the server closes it"


def test_partial_writes_a_reset_peer_with_pending_output_is_let_go() -> None:
    # The bug: a reset peer with pending output never set `failed`,
    # so the server kept asking for writability (a busy loop) and leaked the
    # descriptor.  Here with a real socket pair on 127.0.0.1.
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server_side, _ = listener.accept()
    server_side.setblocking(False)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # linger 0: RST
    conn = Connection(server_side)
    conn.outgoing += b"x" * (4 << 20)
    try:
        deadline = time.monotonic() + 2.0
        calls = 0
        while not conn.done and time.monotonic() < deadline:
            conn.on_writable()
            calls += 1
            time.sleep(0.001)
        assert conn.failed, (
            "after the peer reset, the connection must report failed (self.failed = True) so the "
            f"server closes it; on_writable() was called {calls} times in 2 s and failed stayed False")
    finally:
        server_side.close()


# --- backpressure ---------------------------------------------------------------

def test_backpressure_reads_while_output_is_below_high_water() -> None:
    conn = conn_with(ScriptedSocket(), b"x" * (HIGH_WATER - 1))
    assert conn.wants_read is True, (
        f"with {HIGH_WATER - 1} bytes waiting (below HIGH_WATER = {HIGH_WATER}) the server must "
        f"keep reading: wants_read must be True; yours is {conn.wants_read!r}")


def test_backpressure_stops_reading_at_high_water() -> None:
    conn = conn_with(ScriptedSocket(), b"x" * HIGH_WATER)
    assert conn.wants_read is False, (
        f"with HIGH_WATER ({HIGH_WATER}) bytes or more waiting in self.outgoing, wants_read must be "
        f"False (leave the client to fill its own buffers); yours is {conn.wants_read!r}")


def test_backpressure_no_reading_after_failure() -> None:
    conn = conn_with(ScriptedSocket(), b"")
    conn.failed = True
    assert conn.wants_read is False, (
        f"once the connection has failed, wants_read must be False; yours is {conn.wants_read!r}")


def test_backpressure_no_reading_once_http_decided_to_close() -> None:
    conn = conn_with(ScriptedSocket(), b"")
    conn.http.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert conn.http.should_close, "test set-up: 'Connection: close' makes HTTP close"
    assert conn.wants_read is False, (
        "once HTTP has decided to close (self.http.should_close), wants_read must be False; "
        f"yours is {conn.wants_read!r}")


def test_backpressure_a_fresh_connection_reads() -> None:
    conn = conn_with(ScriptedSocket(), b"")
    assert conn.wants_read is True, (
        f"a new connection with nothing to send must want to read; wants_read is {conn.wants_read!r}")


def test_backpressure_high_water_is_the_module_constant() -> None:
    assert connection.HIGH_WATER == HIGH_WATER
