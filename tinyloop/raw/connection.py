"""What one connection does when the kernel says its socket is ready, written
once for every readiness server (select, poll, epoll, epoll-et, kqueue).
The servers differ only in how they learn *which* sockets are ready; this
file is what they do next.

Rules this file keeps:
  * No waiting.  Every socket here is non-blocking; a call the kernel cannot
    complete at once raises BlockingIOError (EAGAIN) and we return, to be
    called again when the server's system call says the socket is ready.
  * The server owns registration and the socket's lifetime.  A Connection
    never closes itself: it reports ``done``, and the server unregisters the
    descriptor *before* calling ``close()`` (epoll_ctl on a closed fd fails
    with EBADF, and a closed fd number is soon reused by the next accept).
  * A peer that resets, stalls or floods harms only itself: errors close that
    connection alone, nothing here blocks, and ``wants_read`` turns off while
    the connection's unsent output is above the high-water mark.
  * Partial reads and partial writes are the normal case, not the exception.
    HTTPConnection reassembles requests from any split of the byte stream;
    the outgoing buffer keeps whatever the kernel did not take.

A server drives a Connection like this (level-triggered):

    conn = Connection(sock)                     # sock from Acceptor.accept()
    ... wait for readiness on conn.fileno(): read if conn.wants_read,
        write if conn.wants_write ...
    if readable: conn.on_readable()
    if writable: conn.on_writable()
    if conn.done: unregister(conn.fileno()); conn.close()
"""

from __future__ import annotations

import socket

from tinyloop.baseline.blocking import READ_SIZE  # 64 KiB; the baselines say why
from tinyloop.http import HTTPConnection

__all__ = ["HIGH_WATER", "READ_SIZE", "Connection", "close_socket", "prepare"]

# Stop reading from a connection while this many bytes wait to be sent to it.
# Discussion: this is backpressure.  A client that pipelines requests faster
# than it reads the answers would otherwise make us buffer without limit; by
# reading no more until it has taken its output, we let the kernel's receive
# buffer fill, TCP's window close, and the client's own send() block.  The
# mark is a soft cap: one read can add a batch of responses above it (for
# /echo, a body of up to the parser's 16 MiB limit), never more.
HIGH_WATER = 256 * 1024

# One receive buffer for every connection.  The readiness servers run in one
# thread, and each read is copied out (to bytes) before the next recv_into.
_buffer = bytearray(READ_SIZE)
_view = memoryview(_buffer)


def prepare(sock: socket.socket) -> socket.socket:
    """Make an accepted ``sock`` ready for a readiness loop and return it.

    Non-blocking: a new socket starts out blocking, whatever the listener
    (Linux's accept(2) does not pass O_NONBLOCK on, and Python gives the new
    socket the default timeout, None).  TCP_NODELAY turns off Nagle's algorithm, see tcp(7): our
    responses are small and complete, and should leave at once rather than
    wait for the peer's delayed ACK.
    """
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Connection:
    """One non-blocking HTTP connection: a socket, its HTTP state, its unsent output.

    ``sock`` must already be non-blocking (see :func:`prepare`).  The server
    calls :meth:`on_readable` and :meth:`on_writable` when its system call
    reports the socket ready, asks :attr:`wants_read` and :attr:`wants_write`
    which readiness to wait for next, and closes the connection when
    :attr:`done` is true.  ``fileno()`` makes a Connection usable wherever a
    socket is, e.g. in the lists given to ``select.select``.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()          # kept: valid for unregister() after close()
        self.http = HTTPConnection()
        self.outgoing = bytearray()      # response bytes the kernel has not taken yet
        self.failed = False              # the peer reset, or the socket broke

    def fileno(self) -> int:
        return self.fd

    @property
    def wants_read(self) -> bool:
        """True while we will read more: the request stream goes on and output is below HIGH_WATER."""
        # exercise backpressure: begin
        return not self.failed and not self.http.should_close and len(self.outgoing) < HIGH_WATER
        # exercise backpressure: end

    @property
    def wants_write(self) -> bool:
        """True while output is waiting.  Ask for write readiness only then:
        a connected socket is almost always writable, so asking otherwise
        would wake the server for nothing (a busy loop, level-triggered)."""
        return not self.failed and bool(self.outgoing)

    @property
    def done(self) -> bool:
        """True when the server should unregister and :meth:`close` this connection:
        the socket failed, or the HTTP side is finished and its output is sent."""
        return self.failed or (self.http.should_close and not self.outgoing)

    def on_readable(self) -> bool:
        """Read once (at most READ_SIZE bytes), answer what is complete, try to send.

        Returns True if bytes arrived, so the socket may hold more; False when
        the kernel had none (EAGAIN), the peer finished sending (EOF), or the
        connection broke (ECONNRESET and friends: ``done`` is then true).
        """
        try:
            n = self.sock.recv_into(_buffer)
        except BlockingIOError:
            return False
        except OSError:
            self.failed = True  # ECONNRESET, ETIMEDOUT...: this peer is gone
            return False
        # n == 0 is end of stream: HTTPConnection answers what was complete
        # and sets should_close.
        response = self.http.receive_data(bytes(_view[:n]))
        if response:
            self.outgoing += response
            # Optimistic write: most responses fit in the kernel's send buffer,
            # so sending now saves a round through the server's wait.
            self.on_writable()
        return n > 0

    def on_writable(self) -> bool:
        """Send as much of the output as the kernel takes now; keep the rest.

        Returns True if the kernel took bytes (it may take more); False when
        its send buffer was full (EAGAIN), or the send failed (EPIPE,
        ECONNRESET: ``done`` is then true).
        """
        # Discussion: send() may take fewer bytes than offered (a partial
        # write); what it did not take stays at the front of the buffer.
        # Deleting from the front of a bytearray is cheap in CPython (it moves
        # a start offset rather than the bytes), so no memoryview is needed.
        # exercise partial-writes: begin
        try:
            sent = self.sock.send(self.outgoing)
        except BlockingIOError:
            return False  # the send buffer is full: wait for write readiness
        except OSError:
            self.failed = True  # EPIPE, ECONNRESET: the peer will read no more
            return False
        del self.outgoing[:sent]
        return sent > 0
        # exercise partial-writes: end

    def close(self) -> None:
        """Close the socket.  Call after unregistering ``fileno()`` from the server's poller.

        Gracefully (FIN first, see :func:`close_socket`) unless the connection failed.
        """
        close_socket(self.sock, graceful=not self.failed)


def close_socket(sock: socket.socket, graceful: bool = True) -> None:
    """Close ``sock``; if ``graceful``, send FIN first (shutdown(2), SHUT_WR).

    Discussion: a client may still be sending when we close (the rest of an
    oversized header after our 431, say).  close() on a socket with unread
    input sends RST at once (RFC 2525, 2.17), and the client's kernel may
    throw our response away unread.  shutdown(SHUT_WR) first queues FIN right
    behind the response, so the client sees response and end of stream
    before the reset.  Every non-blocking stage closes its sockets here.
    """
    if graceful:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already reset by the peer: nothing left to say
    sock.close()
