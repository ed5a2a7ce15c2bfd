"""The io_uring server with operations that stay armed: multishot accept and
multishot receive on a ring of provided buffers.

uring_server.py submits one accept per connection accepted and one receive
per read, each with a buffer of its own.  Two later kernel features remove
both costs:

    multishot accept (5.19)    one SQE on the listener; a CQE per
                               connection, flagged CQE_F_MORE while the
                               accept stays armed
    multishot receive (6.0)    one SQE per connection; a CQE each time data
                               arrives, in a buffer the kernel takes from a
                               provided-buffer ring only then, and names in
                               the CQE's flags

An idle connection then holds no buffer at all: 10,000 idle clients share
the ring's BUFFERS × BUFFER_SIZE bytes instead of 10,000 × RECV_SIZE.

This class overrides the four methods that submit and complete the accept
and the receive; everything else (sending, closing, the loop) is the base
server's.

Rules this file keeps:
  * An operation without CQE_F_MORE in its CQE has ended, whatever its
    result, and is submitted again if it is still wanted.  A multishot
    receive ends at EOF, on an error, when it is cancelled, and with
    -ENOBUFS when the ring had no free buffer when data arrived.
  * A provided buffer is copied out and given back in the same turn of the
    loop, so the ring runs dry only when more data arrives in one turn than
    it holds.
  * A receive that stays armed reads whether or not we want more, so
    backpressure cancels it, and the base server submits it again when the
    backlog has drained.
"""

from __future__ import annotations

import errno
import socket

from tinyloop.raw.uring import CQE_F_BUFFER, CQE_F_MORE, BufferRing, Ring, buffer_id
from tinyloop.raw.uring import unavailable  # noqa: F401  (the stage table asks it: tinyloop/stages.py)
from tinyloop.raw.uring_server import ACCEPT, RECV, Connection, UringServer
from tinyloop.raw.uring_server import serve as serve_with

__all__ = ["BUFFERS", "BUFFER_SIZE", "MultishotServer", "serve", "unavailable"]

BUFFERS = 256            # a power of two: the ring is indexed by a mask
BUFFER_SIZE = 16 * 1024  # bytes; 4 MiB in all, whatever the number of connections
GROUP = 1                # the buffer group id the receives name


class MultishotServer(UringServer):
    """:class:`UringServer` with a multishot accept and a multishot receive per connection."""

    name = "uring-multishot"

    def __init__(self, listener: socket.socket, ring: Ring) -> None:
        super().__init__(listener, ring)
        self.buffers = BufferRing(ring, GROUP, BUFFERS, BUFFER_SIZE)

    def arm_accept(self) -> None:
        self.ring.prep_accept(self.listener.fileno(), ACCEPT, multishot=True)

    def on_accept(self, res: int, flags: int) -> None:
        if flags & CQE_F_MORE:      # still armed: a connection, nothing to submit
            if res >= 0:
                self.start(res)
            return
        super().on_accept(res, flags)   # it has ended: the base server submits it again

    def arm_recv(self, conn: Connection) -> None:
        self.ring.prep_recv_multishot(conn.fd, GROUP, self.user_data(conn, RECV))
        conn.receiving = True

    def on_recv(self, conn: Connection, res: int, flags: int) -> None:
        # exercise uring-rearm: begin
        if not flags & CQE_F_MORE:
            conn.receiving = conn.cancelling = False   # ended: advance() submits it again if wanted
        if flags & CQE_F_BUFFER:
            bid = buffer_id(flags)
            data = self.buffers.data(bid, res)
            self.buffers.recycle(bid)
            self.received(conn, data)
        elif res == 0:
            self.received(conn, b"")   # EOF
        elif res < 0 and res not in (-errno.ENOBUFS, -errno.ECANCELED):
            conn.failed = True         # ECONNRESET and friends
        # exercise uring-rearm: end
        self.advance(conn)

    def advance(self, conn: Connection) -> None:
        if conn.receiving and not conn.closing and not conn.finished and not conn.wants_read:
            self.cancel_recv(conn)     # backpressure: stop the armed receive
            return
        super().advance(conn)

    def release(self) -> None:
        super().release()
        self.buffers.close()


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with multishot io_uring, until KeyboardInterrupt.

    Raises OSError when io_uring or provided-buffer rings (6.0) are missing here.
    """
    serve_with(listener, MultishotServer)
