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


def test_partial_writes_a_single_byte_taken_is_progress() -> None:
    conn = conn_with(ScriptedSocket(1), b"hello")
    took = conn.on_writable()
    assert took is True, (
        f"on_writable() must return True when the kernel took any bytes, even one; yours returned {took!r}")
    assert conn.outgoing == bytearray(b"ello"), f"the rest must stay: {bytes(conn.outgoing)!r}"


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


def test_backpressure_stops_reading_well_above_high_water() -> None:
    conn = conn_with(ScriptedSocket(), b"x" * (HIGH_WATER * 3 + 1))
    assert conn.wants_read is False, (
        f"with {HIGH_WATER * 3 + 1} bytes waiting (well above HIGH_WATER) wants_read must be False; "
        f"yours is {conn.wants_read!r}")


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


# --- fd-setsize -------------------------------------------------------------------

class FakeAccepted:
    """An accepted socket with a chosen descriptor number; records close()."""

    def __init__(self, fd: int) -> None:
        self.fd, self.closed = fd, False

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        self.closed = True


class FakeAcceptor:
    """What _accept() accepts from: its accept() gives the scripted sockets once."""

    def __init__(self, socks: list[FakeAccepted]) -> None:
        self.socks = socks

    def accept(self) -> list[FakeAccepted]:
        socks, self.socks = self.socks, []
        return socks


def accept_these(monkeypatch: pytest.MonkeyPatch, fds: list[int]) -> tuple[FakeAcceptor, list[FakeAccepted]]:
    """A source of accepted sockets for select_server._accept, however it accepts:
    from an acceptor's accept(), or from accept_all(listener)."""
    from tinyloop.raw import select_server
    socks = [FakeAccepted(fd) for fd in fds]
    source = FakeAcceptor(list(socks))
    monkeypatch.setattr(select_server, "accept_all", lambda listener: listener.accept(), raising=False)
    return source, socks


def test_fd_setsize_descriptors_below_the_limit_are_served(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinyloop.raw import select_server
    limit = select_server.FD_SETSIZE
    source, socks = accept_these(monkeypatch, [5, limit - 1])
    connections: set[Connection] = set()
    select_server._accept(source, connections)  # type: ignore[arg-type]
    served = sorted(conn.fd for conn in connections)
    assert served == [5, limit - 1], (
        f"each accepted socket whose descriptor is below FD_SETSIZE ({limit}) must be wrapped in a "
        f"Connection and added to `connections`; the set holds descriptors {served}")
    assert not any(s.closed for s in socks), "a socket below FD_SETSIZE must not be closed"


def test_fd_setsize_descriptors_at_or_above_the_limit_are_closed_and_logged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tinyloop.raw import select_server
    limit = select_server.FD_SETSIZE
    source, socks = accept_these(monkeypatch, [7, limit, limit + 3])
    logged: list[str] = []
    monkeypatch.setattr(select_server, "log", lambda message, *a, **k: logged.append(str(message)))
    connections: set[Connection] = set()
    select_server._accept(source, connections)  # type: ignore[arg-type]
    served = sorted(conn.fd for conn in connections)
    assert served == [7], (
        f"a descriptor of FD_SETSIZE ({limit}) or more cannot be watched by select(): it must not "
        f"be added to `connections`, and the others must; the set holds {served}")
    closed = [s.fd for s in socks if s.closed]
    assert closed == [limit, limit + 3], (
        f"each refused socket must be closed; closed were descriptors {closed}")
    assert len(logged) == 2 and all("FD_SETSIZE" in line for line in logged), (
        f"each refusal must be logged with a line that mentions FD_SETSIZE; logged: {logged}")


# --- accept-backoff ------------------------------------------------------------------

class _Waited(Exception):
    """Raised by the scripted select() once it has seen what serve() waits for."""


def first_wait(monkeypatch: pytest.MonkeyPatch, rest: float | None) -> tuple[list, object, socket.socket]:
    """What select_server.serve() hands its first select() call, when the acceptor's
    rest_left() says ``rest``: (the read list, the timeout, the listener)."""
    from tinyloop.raw import select_server

    class Resting:
        def __init__(self, listener: socket.socket, name: str, **kwargs: object) -> None:
            self.listener = listener

        def rest_left(self) -> float | None:
            return rest

        def accept(self) -> list:
            return []

    seen: list = []

    def select(readers: list, writers: list, errors: list, timeout: object = None) -> tuple:
        seen.extend([list(readers), timeout])
        raise _Waited

    monkeypatch.setattr(select_server, "Acceptor", Resting)
    monkeypatch.setattr(select_server, "select", type("select", (), {"select": staticmethod(select)}))
    listener = socket.socket()
    try:
        with pytest.raises(_Waited):
            select_server.serve(listener)
    finally:
        listener.close()
    assert seen, "serve() must call select.select() to wait"
    return seen[0], seen[1], listener


def test_accept_backoff_a_resting_listener_is_left_out_of_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    readers, timeout, listener = first_wait(monkeypatch, 0.75)
    assert listener not in readers, (
        "while acceptor.rest_left() is a number (the listener rests after EMFILE) the listener must "
        "not be in select()'s read list: it stays readable while connections wait, and the loop "
        "would spin; yours passed it")
    assert timeout == 0.75, (
        f"select() must wait at most the rest left (acceptor.rest_left(), 0.75 s here), so the loop "
        f"wakes when the rest is over; yours passed timeout={timeout!r}")


def test_accept_backoff_a_listener_not_resting_is_watched_with_no_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    readers, timeout, listener = first_wait(monkeypatch, None)
    assert listener in readers, (
        "when acceptor.rest_left() is None the server may accept: the listener must be in "
        f"select()'s read list; yours passed {readers}")
    assert timeout is None, (
        f"with no rest under way select() must block until something is ready (timeout None); "
        f"yours passed timeout={timeout!r}")


# --- kqueue-changes -------------------------------------------------------------------

class Wants:
    """What interest_changes reads of a connection."""

    def __init__(self, fd: int, read: bool, write: bool) -> None:
        self.fd, self.wants_read, self.wants_write = fd, read, write


def changes(conn: Wants, enabled: dict) -> list[tuple[int, int, int]]:
    from tinyloop.raw import kqueue_server
    made = kqueue_server.interest_changes(conn, enabled)  # type: ignore[arg-type]
    return [(event.ident, event.filter, event.flags) for event in made]


@pytest.mark.parametrize("read, write", [(True, False), (False, True), (True, True), (False, False)])
def test_kqueue_changes_nothing_to_change_makes_no_kevent(read: bool, write: bool) -> None:
    enabled = {9: (read, write)}
    made = changes(Wants(9, read, write), enabled)
    assert made == [], (
        f"when the kernel already has (READ {read}, WRITE {write}) and the connection wants the "
        f"same, no kevent must be made; yours made {made}")
    assert enabled[9] == (read, write), "the recorded pair must stay as it was"


@pytest.mark.parametrize("have, want", [((True, False), (False, False)), ((False, False), (True, False)),
                                         ((True, False), (True, True)), ((True, True), (True, False)),
                                         ((True, False), (False, True)), ((False, True), (True, False))])
def test_kqueue_changes_one_kevent_per_filter_that_changes(have: tuple, want: tuple) -> None:
    from tinyloop.raw import kqueue_server as k
    enabled = {9: have}
    made = changes(Wants(9, *want), enabled)
    expected = [(9, f, k.ENABLE if on else k.DISABLE)
                for f, on, was in zip((k.READ, k.WRITE), want, have) if on != was]
    assert made == expected, (
        f"from (READ {have[0]}, WRITE {have[1]}) to (READ {want[0]}, WRITE {want[1]}) the changes "
        f"must be one kevent per filter that changes, READ first, EV_ENABLE to turn a filter on and "
        f"EV_DISABLE to turn it off: expected {expected}, yours made {made}")
    assert enabled[9] == want, (
        f"enabled[conn.fd] must record the new pair {want}; it holds {enabled[9]}")


# --- edge-triggered ---------------------------------------------------------------------

class Scripted:
    """A connection whose on_writable/on_readable return what the script says, round by round."""

    def __init__(self, writes: list[bool], reads: list[bool], wants_write: bool = True,
                 wants_read: bool = True) -> None:
        self.writes, self.reads = list(writes), list(reads)
        self.wants_write, self.wants_read = wants_write, wants_read
        self.calls: list[str] = []

    def on_writable(self) -> bool:
        self.calls.append("write")
        return self.writes.pop(0) if self.writes else False

    def on_readable(self) -> bool:
        self.calls.append("read")
        return self.reads.pop(0) if self.reads else False


def progress(conn: Scripted, budget: int = 16) -> object:
    from tinyloop.raw import epoll_et_server
    return epoll_et_server.make_progress(conn, budget)  # type: ignore[arg-type]


def test_edge_triggered_stops_when_neither_side_moves() -> None:
    conn = Scripted(writes=[True, False], reads=[True, True, False])
    result = progress(conn)
    assert result is False, (
        f"when neither side makes progress any more, make_progress must return False; yours returned {result!r}")
    assert conn.calls == ["write", "read", "write", "read", "write", "read"], (
        "each round must send (on_writable) then read (on_readable), and go round again while "
        f"either moved; the calls were {conn.calls}")


def test_edge_triggered_the_budget_runs_out_while_it_could_move() -> None:
    conn = Scripted(writes=[True] * 10, reads=[True] * 10)
    result = progress(conn, budget=3)
    assert result is True, (
        "when the budget runs out while the connection could still move, make_progress must return "
        f"True (the server comes back to it without an edge); yours returned {result!r}")
    assert conn.calls.count("write") == 3 and conn.calls.count("read") == 3, (
        f"it must go round at most `budget` (3) times; the calls were {conn.calls}")


def test_edge_triggered_does_not_write_what_it_does_not_want() -> None:
    conn = Scripted(writes=[True], reads=[True, False], wants_write=False)
    progress(conn)
    assert "write" not in conn.calls, (
        "send only while the connection wants to write (conn.wants_write); yours called on_writable")


def test_edge_triggered_does_not_read_what_it_does_not_want() -> None:
    conn = Scripted(writes=[True, False], reads=[True], wants_read=False)
    progress(conn)
    assert "read" not in conn.calls, (
        "read only while the connection wants to read (conn.wants_read); yours called on_readable")


def test_edge_triggered_one_side_moving_is_enough_to_go_round() -> None:
    conn = Scripted(writes=[False, False, False], reads=[True, True, False])
    result = progress(conn)
    assert conn.calls.count("read") == 3 and result is False, (
        "go round again while either side moved (here only reads did), until neither moves; "
        f"the calls were {conn.calls}, the result {result!r}")


def test_edge_triggered_a_budget_of_one_is_one_round() -> None:
    conn = Scripted(writes=[True], reads=[False])
    result = progress(conn, budget=1)
    assert conn.calls == ["write", "read"] and result is True, (
        f"a budget of 1 is one round; the calls were {conn.calls}, the result {result!r}")
