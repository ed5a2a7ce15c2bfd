"""The book's HTTP server on io_uring: completions instead of readiness.

The readiness servers wait to be told a socket *can* be read, then read it.
This one hands the kernel the read itself, with a buffer, and waits to be
told it *was* read.  The server's loop is one system call a turn:

    while True:
        ring.submit_and_wait(1)        # io_uring_enter(2): submit the SQEs
                                       # written since the last turn, and
                                       # wait for at least one completion
        for user_data, res, flags in ring.completions():
            ... the operation user_data names has ended with res ...
            ... write the SQEs that follow from it (recv again, send, close) ...

Every connection always has at most one receive and one send outstanding,
and every operation says in its user_data which connection and which kind
of operation it was: an accept, a receive, a send, a close, a cancel, a
timer.

Rules this file keeps:
  * A buffer handed to the kernel is the kernel's until its completion
    arrives.  The receive buffer is not read, and the bytes being sent are
    not changed or freed, while their operation is outstanding; responses
    made meanwhile wait in ``outgoing`` (the completion chapter's first rule).
  * user_data carries a connection's serial number, never its descriptor.
    A descriptor number is reused as soon as it is closed, while a
    completion for the old connection may still be in the ring.
  * Closing waits for the connection's operations.  A receive still
    outstanding is cancelled first (IORING_OP_ASYNC_CANCEL, a request), and
    the descriptor is closed only after that receive's own completion:
    closing under it would leave the kernel holding the socket.
  * Backpressure as in the readiness servers: no receive is submitted
    while HIGH_WATER bytes wait to be sent to that connection.
  * Out of descriptors is "not now": an accept that fails with EMFILE and
    the like is submitted again after ACCEPT_RETRY_DELAY, by a timer that is
    itself an operation (IORING_OP_TIMEOUT).
  * A peer that resets, stalls or floods harms only itself, as in Part I.

uring_multishot_server.py is the same server with one accept and one
receive per connection that stay armed; it overrides the methods that
submit and complete those two operations.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field

from tinyloop.baseline.blocking import ACCEPT_RETRY_DELAY, OUT_OF_RESOURCES
from tinyloop.http import HTTPConnection
from tinyloop.raw.accept import NEXT_ONE
from tinyloop.raw.connection import HIGH_WATER
from tinyloop.raw.uring import Ring, address_of, bytes_address, timespec
from tinyloop.raw.uring import unavailable  # noqa: F401  (the stage table asks it: tinyloop/stages.py)
from tinyloop.serving import log

__all__ = ["RECV_SIZE", "Connection", "UringServer", "serve", "unavailable"]

# One receive buffer per connection, outstanding for as long as the
# connection is idle: 10,000 idle clients hold 160 MiB of buffers here.
# The multishot server's provided buffers are the remedy.
RECV_SIZE = 16 * 1024

# The kind of operation, in user_data's low bits; the connection's serial
# number is in the bits above.
ACCEPT, RECV, SEND, SHUTDOWN, CLOSE, CANCEL, TIMER = range(7)
_KIND_BITS = 3


@dataclass(eq=False)
class Connection:
    """One accepted connection and the operations it has outstanding.

    ``ident`` is its serial number (user_data's high bits), ``fd`` its
    descriptor.  ``sending`` is the bytes object the kernel is sending from
    and ``sent`` how much of it is gone; ``outgoing`` collects responses
    made while a send is outstanding.
    """

    ident: int
    fd: int
    http: HTTPConnection = field(default_factory=HTTPConnection)
    buffer: bytearray | None = None   # its receive buffer, made at its first receive
    outgoing: bytearray = field(default_factory=bytearray)
    sending: bytes | None = None
    sent: int = 0
    receiving: bool = False      # a receive is outstanding
    failed: bool = False         # the peer reset, or a send failed
    closing: bool = False        # close asked for; waiting for outstanding operations
    cancelling: bool = False     # a cancel of the receive is outstanding
    pin: object = None           # keeps ``buffer`` unmovable while the kernel may write it

    @property
    def backlog(self) -> int:
        """Bytes made for this peer that it has not taken yet."""
        return len(self.outgoing) + (len(self.sending) - self.sent if self.sending else 0)

    @property
    def wants_read(self) -> bool:
        """True while the server should keep a receive outstanding."""
        return (not self.failed and not self.closing and not self.http.should_close
                and self.backlog < HIGH_WATER)

    @property
    def finished(self) -> bool:
        """True when the connection should close: it failed, or all it owes is sent."""
        return self.failed or (self.http.should_close and self.backlog == 0)


class UringServer:
    """An HTTP server on ``listener`` (bound, listening) driven by ``ring``.

    ``name`` (the stage) prefixes log lines.  :meth:`serve` runs until
    KeyboardInterrupt and closes every connection it accepted, but neither
    the listener nor the ring, which the caller owns.
    """

    name = "uring"

    def __init__(self, listener: socket.socket, ring: Ring) -> None:
        self.listener = listener
        self.ring = ring
        self.connections: dict[int, Connection] = {}   # serial number -> connection
        self.next_ident = 1
        self.resting = False                           # out of descriptors: a timer will re-arm accept
        self.rest_interval = timespec(ACCEPT_RETRY_DELAY)
        # Linux copies TCP_NODELAY from a listener to the sockets it accepts
        # (tcp(7) does not promise it; tests/test_uring.py checks it), so one
        # setsockopt here spares one per connection: an accept completion is
        # then all a new connection costs in system calls.
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # --- the loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        """Submit, wait, dispatch each completion, forever (until KeyboardInterrupt)."""
        self.arm_accept()
        handlers = {ACCEPT: self.on_accept, RECV: self.on_recv, SEND: self.on_send,
                    CLOSE: self.on_closed, TIMER: self.on_rest_over}
        ring = self.ring
        try:
            while True:
                try:
                    ring.submit_and_wait(1)
                except InterruptedError:
                    pass  # a signal: its handler runs now (KeyboardInterrupt ends the loop)
                for user_data, res, flags in ring.completions():
                    kind = user_data & ((1 << _KIND_BITS) - 1)
                    handler = handlers.get(kind)
                    if handler is None:
                        continue  # SHUTDOWN and CANCEL: their targets' completions tell the story
                    if kind in (ACCEPT, TIMER):
                        handler(res, flags)
                        continue
                    conn = self.connections.get(user_data >> _KIND_BITS)
                    if conn is not None:
                        handler(conn, res, flags)
        finally:
            for conn in self.connections.values():
                socket.close(conn.fd)   # closing the ring (the caller's) cancels what is outstanding

    @staticmethod
    def user_data(conn: Connection | None, kind: int) -> int:
        return ((conn.ident if conn else 0) << _KIND_BITS) | kind

    # --- accepting ---------------------------------------------------------------------------

    def arm_accept(self) -> None:
        """Submit one accept on the listener."""
        self.ring.prep_accept(self.listener.fileno(), ACCEPT)

    def on_accept(self, res: int, flags: int) -> None:
        """An accept completed: ``res`` is the new descriptor, or -errno."""
        if res >= 0:
            if self.resting:
                self.resting = False
                log(f"{self.name}: accepting connections again")
            self.start(res)
        elif -res in OUT_OF_RESOURCES:
            self.rest(-res)
            return
        elif -res not in NEXT_ONE:
            raise OSError(-res, f"accept on the listener failed: {errno.errorcode.get(-res, -res)}")
        self.arm_accept()

    def start(self, fd: int) -> Connection:
        """Take a new connection's descriptor: a serial number and its first receive.

        No system call: TCP_NODELAY came with the descriptor, from the
        listener (see :meth:`__init__`).
        """
        conn = Connection(self.next_ident, fd)
        self.next_ident += 1
        self.connections[conn.ident] = conn
        self.arm_recv(conn)
        return conn

    def rest(self, code: int) -> None:
        """Out of descriptors: accept again when a timer of ACCEPT_RETRY_DELAY seconds completes."""
        if not self.resting:
            log(f"{self.name}: accept failed ({errno.errorcode.get(code, code)}); not accepting for"
                f" {ACCEPT_RETRY_DELAY:g} s at a time until descriptors free up")
            self.resting = True
        self.ring.prep_timeout(self.rest_interval, TIMER)

    def on_rest_over(self, res: int, flags: int) -> None:
        self.arm_accept()

    # --- receiving ---------------------------------------------------------------------------

    def arm_recv(self, conn: Connection) -> None:
        """Submit one receive into the connection's own buffer."""
        if conn.buffer is None:
            conn.buffer = bytearray(RECV_SIZE)
        address, conn.pin = address_of(conn.buffer)
        self.ring.prep_recv(conn.fd, address, RECV_SIZE, self.user_data(conn, RECV))
        conn.receiving = True

    def on_recv(self, conn: Connection, res: int, flags: int) -> None:
        """A receive completed: ``res`` bytes are in the buffer, 0 is EOF, -errno a failure."""
        conn.receiving = conn.cancelling = False
        conn.pin = None
        if res >= 0:
            assert conn.buffer is not None
            self.received(conn, bytes(memoryview(conn.buffer)[:res]))
        elif res != -errno.ECANCELED:
            conn.failed = True   # ECONNRESET and friends: this peer is gone
        self.advance(conn)

    def received(self, conn: Connection, data: bytes) -> None:
        """Feed ``data`` (b"" at EOF) to the connection's HTTP state; send what it answers."""
        response = conn.http.receive_data(data)
        if response:
            conn.outgoing += response
            self.flush(conn)

    # --- sending -----------------------------------------------------------------------------

    def flush(self, conn: Connection) -> None:
        """If no send is outstanding, hand everything waiting in ``outgoing`` to the kernel."""
        # exercise uring-send: begin
        if conn.sending is None and conn.outgoing and not conn.failed:
            conn.sending, conn.sent = bytes(conn.outgoing), 0
            conn.outgoing.clear()
            self.submit_send(conn)
        # exercise uring-send: end

    def submit_send(self, conn: Connection) -> None:
        """Submit a send of what is left of ``conn.sending``, from ``conn.sent`` on."""
        assert conn.sending is not None
        self.ring.prep_send(conn.fd, bytes_address(conn.sending) + conn.sent,
                            len(conn.sending) - conn.sent, self.user_data(conn, SEND))

    def on_send(self, conn: Connection, res: int, flags: int) -> None:
        """A send completed: ``res`` bytes went (perhaps fewer than asked), or -errno."""
        # exercise uring-send: begin
        assert conn.sending is not None
        if res < 0:
            conn.failed = True   # EPIPE, ECONNRESET: the peer will read no more
            conn.sending = None
        else:
            conn.sent += res
            if conn.sent < len(conn.sending):
                self.submit_send(conn)   # a partial send: the rest, from where it stopped
            else:
                conn.sending = None
                self.flush(conn)
        # exercise uring-send: end
        self.advance(conn)

    # --- what next, and closing -----------------------------------------------------------------

    def advance(self, conn: Connection) -> None:
        """After any completion of ``conn``: receive again, or close, or wait for what is outstanding."""
        if conn.closing:
            self.close(conn)
        elif conn.finished:
            conn.closing = True
            self.close(conn)
        elif conn.wants_read and not conn.receiving:
            self.arm_recv(conn)

    def close(self, conn: Connection) -> None:
        """Close ``conn`` once nothing of it is outstanding; cancel a receive that still is."""
        if conn.receiving:
            self.cancel_recv(conn)
            return
        if conn.sending is not None:
            return  # its completion comes back here through advance()
        if conn.fd < 0:
            return  # the close itself is outstanding
        fd, conn.fd = conn.fd, -1
        if not conn.failed:
            # FIN after the last response, then the close: hard-linked, so
            # the close runs even when shutdown fails (a peer that reset).
            self.ring.prep_shutdown(fd, socket.SHUT_WR, self.user_data(conn, SHUTDOWN), link=True)
        self.ring.prep_close(fd, self.user_data(conn, CLOSE))

    def cancel_recv(self, conn: Connection) -> None:
        """Ask the kernel to cancel ``conn``'s outstanding receive (once)."""
        if not conn.cancelling:
            conn.cancelling = True
            self.ring.prep_cancel(self.user_data(conn, RECV), self.user_data(conn, CANCEL))

    def on_closed(self, conn: Connection, res: int, flags: int) -> None:
        """The close completed: the connection is gone."""
        del self.connections[conn.ident]

    def release(self) -> None:
        """Free what the kernel may write into; called after the ring is closed."""
        self.connections.clear()


def serve(listener: socket.socket, server: type[UringServer] = UringServer) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with io_uring, until KeyboardInterrupt.

    ``server`` is the class that drives the ring (the multishot stage passes
    its own).  Raises OSError when io_uring cannot be set up here (the
    message says why: see :func:`tinyloop.raw.uring.unavailable`).
    """
    ring = Ring(entries=256)
    driver = None
    try:
        driver = server(listener, ring)
        driver.serve()
    finally:
        ring.close()   # cancels every outstanding operation
        if driver is not None:
            driver.release()
