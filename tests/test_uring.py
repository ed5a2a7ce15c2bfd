"""Part VI's io_uring stage: the ring itself, and the servers' rules.

Two kinds of test.  The first half drives a real ring (skipped, naming the
reason, where io_uring is missing or refused): what the kernel answers to a
receive, a cancel, a timer, a multishot receive on provided buffers.  The
second half drives the servers with a scripted ring (``ScriptedRing``), as
the earlier Parts inject a fake selector: it records every SQE the server
prepares, and the test plays the kernel by choosing each completion.  So
the rules of the completion chapter are checked one by one, on every run,
with the same interleaving: a buffer handed to the kernel is not changed
until its completion; a partial send is continued from where it stopped; a
multishot receive that ended is submitted again, one that goes on is not.
The HTTP behaviour of both servers is tests/test_servers.py's.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import socket
from dataclasses import dataclass, field

import pytest

from tinyloop import stages
from tinyloop.http import HELLO
from tinyloop.raw import uring
from tinyloop.raw.connection import HIGH_WATER
from tinyloop.raw.uring_multishot_server import MultishotServer
from tinyloop.raw.uring_server import ACCEPT, CLOSE, RECV, SEND, UringServer

REASON = uring.unavailable()
needs_io_uring = pytest.mark.skipif(REASON is not None, reason=f"io_uring: {REASON}")

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
GET_CLOSE = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


# --- the ring, on this kernel --------------------------------------------------------------

@pytest.fixture
def ring():
    if REASON is not None:
        pytest.skip(f"io_uring: {REASON}")
    r = uring.Ring(entries=8)
    yield r
    r.close()


@needs_io_uring
def test_a_receive_completes_when_data_arrives_not_before(ring: uring.Ring) -> None:
    a, b = socket.socketpair()
    with a, b:
        buffer = bytearray(64)
        address, pin = uring.address_of(buffer)
        ring.prep_recv(a.fileno(), address, len(buffer), user_data=41)
        ring.submit_and_wait(0)
        assert list(ring.completions()) == []          # submitted: nothing has happened yet
        b.send(b"hello")
        ring.submit_and_wait(1)
        assert list(ring.completions()) == [(41, 5, 0)]
        assert buffer[:5] == b"hello"                   # the kernel wrote into our buffer
        del pin


@needs_io_uring
def test_cancel_is_a_request_and_the_target_reports_its_own_end(ring: uring.Ring) -> None:
    a, b = socket.socketpair()
    with a, b:
        buffer = bytearray(64)
        address, pin = uring.address_of(buffer)
        ring.prep_recv(a.fileno(), address, len(buffer), user_data=1)
        ring.prep_cancel(target=1, user_data=2)
        ring.submit_and_wait(2)
        assert sorted(ring.completions()) == [(1, -errno.ECANCELED, 0), (2, 0, 0)]
        ring.prep_cancel(target=1, user_data=3)          # nothing left to cancel
        ring.submit_and_wait(1)
        assert list(ring.completions()) == [(3, -errno.ENOENT, 0)]
        del pin


@needs_io_uring
def test_a_timer_is_an_operation_that_ends_with_etime(ring: uring.Ring) -> None:
    interval = uring.timespec(0.01)
    ring.prep_timeout(interval, user_data=9)
    ring.submit_and_wait(1)
    assert list(ring.completions()) == [(9, -errno.ETIME, 0)]


@needs_io_uring
def test_multishot_receive_stays_armed_until_the_buffers_run_out(ring: uring.Ring) -> None:
    buffers = uring.BufferRing(ring, group=7, count=2, size=8)
    a, b = socket.socketpair()
    try:
        ring.prep_recv_multishot(a.fileno(), group=7, user_data=5)
        seen = []
        for chunk in (b"one", b"two"):
            b.send(chunk)
            ring.submit_and_wait(1)
            for user_data, res, flags in ring.completions():
                assert (user_data, res) == (5, len(chunk))
                assert flags & uring.CQE_F_MORE and flags & uring.CQE_F_BUFFER
                seen.append(buffers.data(uring.buffer_id(flags), res))   # not recycled: 2 used
        assert seen == [b"one", b"two"]
        b.send(b"three")          # no buffer left: the receive ends, and says so
        ring.submit_and_wait(1)
        [(user_data, res, flags)] = list(ring.completions())
        assert (user_data, res) == (5, -errno.ENOBUFS) and not flags & uring.CQE_F_MORE
    finally:
        a.close()
        b.close()
        ring.close()
        buffers.close()
        ring.close = lambda: None  # type: ignore[method-assign]  (closed already, for the fixture)


def test_accepted_sockets_inherit_tcp_nodelay_from_the_listener() -> None:
    # The servers set TCP_NODELAY once, on the listener, and rely on this.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with socket.create_connection(listener.getsockname()) as client:
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_unavailable_says_why_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uring.sys, "platform", "darwin")
    assert uring.unavailable() == "io_uring is Linux's: this is darwin"
    monkeypatch.setattr(uring.sys, "platform", "linux")

    def refused(*args: object, **kwargs: object) -> object:
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(uring, "Ring", refused)
    assert "EPERM" in uring.unavailable()
    # ... and the stage table passes the reason on, so tests and `serve` skip naming it.
    assert "EPERM" in stages.get("uring").unavailable()
    assert "EPERM" in stages.get("uring-multishot").unavailable()


# --- the servers, on a scripted ring ---------------------------------------------------------

@dataclass
class SQE:
    op: str
    fd: int
    user_data: int
    data: bytes = b""      # for a send: the bytes at its address, read when it was prepared
    address: int = 0
    length: int = 0


@dataclass
class ScriptedRing:
    """Records what the server prepares; the test decides what completes, and how."""

    sqes: list[SQE] = field(default_factory=list)

    def prep_accept(self, fd: int, user_data: int, *, multishot: bool = False) -> None:
        self.sqes.append(SQE("accept-multishot" if multishot else "accept", fd, user_data))

    def prep_recv(self, fd: int, addr: int, length: int, user_data: int) -> None:
        self.sqes.append(SQE("recv", fd, user_data, address=addr, length=length))

    def prep_recv_multishot(self, fd: int, group: int, user_data: int) -> None:
        self.sqes.append(SQE("recv-multishot", fd, user_data))

    def prep_send(self, fd: int, addr: int, length: int, user_data: int) -> None:
        self.sqes.append(SQE("send", fd, user_data, ctypes.string_at(addr, length), addr, length))

    def prep_shutdown(self, fd: int, how: int, user_data: int, *, link: bool = False) -> None:
        self.sqes.append(SQE("shutdown", fd, user_data))

    def prep_close(self, fd: int, user_data: int) -> None:
        self.sqes.append(SQE("close", fd, user_data))

    def prep_cancel(self, target: int, user_data: int) -> None:
        self.sqes.append(SQE("cancel", -1, user_data, address=target))

    def prep_timeout(self, timespec: bytearray, user_data: int) -> None:
        self.sqes.append(SQE("timeout", -1, user_data))

    def register_buffer_ring(self, ring_address: int, entries: int, group: int) -> None:
        pass

    def take(self, op: str | None = None) -> list[SQE]:
        """The SQEs prepared since the last take (only those of kind ``op``, if given)."""
        taken, self.sqes = self.sqes, []
        return [s for s in taken if op is None or s.op == op]


def response_count(data: bytes) -> int:
    return data.count(b"HTTP/1.1 200 OK")


@pytest.fixture
def listener():
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def connected(server_class: type[UringServer], listener: socket.socket):
    """A server on a scripted ring, and one connection it accepted (a real loopback socket)."""
    ring = ScriptedRing()
    server = server_class(listener, ring)  # type: ignore[arg-type]
    server.arm_accept()
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    _peers.append(client)
    server.on_accept(accepted.detach(), uring.CQE_F_MORE if server_class is MultishotServer else 0)
    [conn] = server.connections.values()
    _peers.append(socket.socket(fileno=conn.fd))  # closed after the test (the ring is not real)
    return server, ring, conn


_peers: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_peers():
    yield
    while _peers:
        _peers.pop().close()


def feed(server: UringServer, ring: ScriptedRing, conn, data: bytes) -> None:
    """Play the kernel: complete ``conn``'s outstanding single-shot receive with ``data``."""
    assert conn.receiving, "no receive is outstanding"
    conn.buffer[:len(data)] = data
    ring.sqes = [s for s in ring.sqes if not (s.op == "recv" and s.user_data == server.user_data(conn, RECV))]
    server.on_recv(conn, len(data), 0)


def test_a_response_is_sent_from_memory_that_holds_exactly_it(listener: socket.socket) -> None:
    server, ring, conn = connected(UringServer, listener)
    ring.take()
    feed(server, ring, conn, GET)
    sends = [s for s in ring.sqes if s.op == "send"]
    assert len(sends) == 1, "one response, one send"
    assert response_count(sends[0].data) == 1 and sends[0].data.endswith(HELLO)
    assert sends[0].user_data == server.user_data(conn, SEND)


def test_while_a_send_is_outstanding_its_bytes_stay_as_they_were(listener: socket.socket) -> None:
    server, ring, conn = connected(UringServer, listener)
    ring.take()
    feed(server, ring, conn, GET)
    [send] = ring.take("send")
    feed(server, ring, conn, GET + GET)        # two more responses while the kernel sends the first
    assert ring.take("send") == [], "a second send was submitted while the first was outstanding"
    assert ctypes.string_at(send.address, send.length) == send.data, \
        "the memory handed to the kernel changed before its completion"
    server.on_send(conn, send.length, 0)
    sends = ring.take("send")
    assert len(sends) == 1, f"after the completion, what waited must go in one send, not {len(sends)}"
    assert response_count(sends[0].data) == 2, "after the completion, both waiting responses go in one send"


def test_a_partial_send_goes_on_from_where_it_stopped(listener: socket.socket) -> None:
    server, ring, conn = connected(UringServer, listener)
    ring.take()
    feed(server, ring, conn, GET)
    [send] = ring.take("send")
    server.on_send(conn, 5, 0)                 # the kernel took 5 bytes
    sends = ring.take("send")
    assert len(sends) == 1, (f"after a send of {send.length} bytes completed with 5, "
                             f"{len(sends)} sends were submitted: the other {send.length - 5} must go in one")
    [rest] = sends
    assert rest.address == send.address + 5 and rest.data == send.data[5:], \
        "the rest of a partial send must start at the first byte not sent"
    server.on_send(conn, len(rest.data), 0)
    assert ring.take("send") == [], "nothing is left to send"
    assert conn.backlog == 0


def test_a_failed_send_closes_only_that_connection(listener: socket.socket) -> None:
    server, ring, conn = connected(UringServer, listener)
    ring.take()
    feed(server, ring, conn, GET)
    ring.take()
    server.on_send(conn, -errno.EPIPE, 0)
    # Its receive is outstanding: cancel it, and close only after its completion.
    sqes = ring.take()
    assert [s.op for s in sqes] == ["cancel"] and sqes[0].address == server.user_data(conn, RECV)
    server.on_recv(conn, -errno.ECANCELED, 0)
    assert [s.op for s in ring.take()] == ["close"], "a failed connection closes without a shutdown"
    server.on_closed(conn, 0, 0)
    assert server.connections == {}


def test_a_connection_closes_after_its_last_response_is_sent(listener: socket.socket) -> None:
    server, ring, conn = connected(UringServer, listener)
    ring.take()
    feed(server, ring, conn, GET_CLOSE)
    [send] = ring.take("send")
    assert not [s for s in ring.sqes if s.op == "recv"], "no receive after Connection: close"
    server.on_send(conn, len(send.data), 0)
    assert [(s.op, s.user_data) for s in ring.take()] == [
        ("shutdown", server.user_data(conn, 3)), ("close", server.user_data(conn, CLOSE))]


def test_backpressure_stops_receiving(listener: socket.socket) -> None:
    server, ring, conn = connected(UringServer, listener)
    ring.take()
    requests = GET * (HIGH_WATER // 100)       # their answers exceed the high-water mark
    for start in range(0, len(requests), 16 * 1024):
        if not conn.receiving:
            break
        feed(server, ring, conn, requests[start:start + 16 * 1024])
    assert conn.backlog >= HIGH_WATER
    assert not conn.receiving and not ring.take("recv"), "no receive while the backlog is above HIGH_WATER"


def test_a_completion_for_a_closed_connection_reaches_nobody(listener: socket.socket) -> None:
    # user_data names a connection by serial number: a late CQE for a
    # closed one is dropped, even when its descriptor number is reused.
    server, ring, conn = connected(UringServer, listener)
    server.connections.clear()
    late = server.user_data(conn, RECV)
    assert (late >> 3) not in server.connections


# --- multishot: re-arming what ended ----------------------------------------------------------

def deliver(server: MultishotServer, conn, data: bytes, more: bool) -> int:
    """Play the kernel: put ``data`` in a free provided buffer and complete the receive with it."""
    bid = next(_buffer_ids) % server.buffers.count
    server.buffers.view[bid * server.buffers.size:bid * server.buffers.size + len(data)] = data
    flags = uring.CQE_F_BUFFER | (bid << 16) | (uring.CQE_F_MORE if more else 0)
    server.on_recv(conn, len(data), flags)
    return bid


_buffer_ids = itertools.count()


@pytest.fixture
def multishot(listener: socket.socket):
    server, ring, conn = connected(MultishotServer, listener)
    yield server, ring, conn
    server.release()


def test_multishot_accept_is_armed_once_and_rearmed_when_it_ends(multishot) -> None:
    server, ring, conn = multishot
    assert [s.op for s in ring.take() if s.op.startswith("accept")] == ["accept-multishot"]
    server.on_accept(-errno.EMFILE, 0)           # ended, out of descriptors: a rest, then again
    assert [s.op for s in ring.take()] == ["timeout"]
    server.on_rest_over(-errno.ETIME, 0)
    assert [s.op for s in ring.take()] == ["accept-multishot"]
    assert ring.sqes == [] and ACCEPT == 0


def test_multishot_receive_that_goes_on_is_not_submitted_again(multishot) -> None:
    server, ring, conn = multishot
    ring.take()
    deliver(server, conn, GET, more=True)
    assert ring.take("recv-multishot") == [], "the receive is still armed (CQE_F_MORE)"
    assert conn.receiving


def test_multishot_receive_that_ended_is_submitted_again(multishot) -> None:
    server, ring, conn = multishot
    ring.take()
    deliver(server, conn, GET, more=False)
    assert [s.op for s in ring.take("recv-multishot")] == ["recv-multishot"], \
        "a CQE without CQE_F_MORE ends the receive: submit it again"
    server.on_recv(conn, -errno.ENOBUFS, 0)      # the buffers ran out: it ended, nothing failed
    assert not conn.failed, "-ENOBUFS only says the buffers ran out: the connection has not failed"
    assert [s.op for s in ring.take("recv-multishot")] == ["recv-multishot"], \
        "after -ENOBUFS the receive has ended: submit it again"


def test_multishot_every_provided_buffer_goes_back_after_its_data_is_copied(multishot) -> None:
    server, ring, conn = multishot
    ring.take()
    recycled = []
    size = server.buffers.size

    def give_back(bid: int) -> None:
        # The kernel may fill a buffer again as soon as it is back in the ring.
        server.buffers.view[bid * size:(bid + 1) * size] = b"\xff" * size
        recycled.append(bid)
    server.buffers.recycle = give_back  # type: ignore[method-assign]
    used = [deliver(server, conn, GET, more=True) for _ in range(3)]
    assert recycled == used, "each buffer the kernel used must be given back, once"
    sent = b"".join(s.data for s in ring.take("send")) + bytes(conn.outgoing)
    assert b"400 Bad Request" not in sent, "copy the data out before giving its buffer back: the kernel may reuse it"
    assert response_count(sent) == 3, "three requests arrived: three answers"


def test_multishot_end_of_stream_and_errors_are_not_rearmed(multishot) -> None:
    server, ring, conn = multishot
    ring.take()
    server.on_recv(conn, 0, 0)                   # EOF
    assert ring.take("recv-multishot") == [], "EOF: nothing more will come"
    conn.failed = False
    server.advance(conn)
    other = server.start(socket.socket().detach())  # a second connection; its reset harms only it
    _peers.append(socket.socket(fileno=other.fd))
    ring.take()
    server.on_recv(other, -errno.ECONNRESET, 0)
    assert ring.take("recv-multishot") == [] and other.failed


def test_multishot_backpressure_cancels_an_armed_receive(multishot) -> None:
    server, ring, conn = multishot
    ring.take()
    while conn.backlog < HIGH_WATER:
        deliver(server, conn, GET * 100, more=True)
    assert "cancel" in [s.op for s in ring.take()], "a receive that stays armed must be cancelled"
