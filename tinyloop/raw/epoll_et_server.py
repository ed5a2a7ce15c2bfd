"""epoll(7) in edge-triggered mode (EPOLLET).

Level-triggered epoll answers "is this socket ready?" on every call, for as
long as it is.  Edge-triggered epoll answers "did this socket *become*
ready?": a descriptor is reported when new data arrives or room appears in
its send buffer, once, and then not again until the next such change.

Rules that follow (epoll(7), "Level-triggered and edge-triggered"):
  * Drain to EAGAIN.  After an edge we accept, recv and send until the
    kernel says EAGAIN, because bytes we leave behind will not be reported
    again.  Reading 64 KiB of a 200 KiB request and waiting would hang.
  * Register once.  Every socket is registered for EPOLLIN | EPOLLOUT |
    EPOLLET when accepted and never modified; wanting to write or not is our
    own state, not the kernel's.  The level-triggered server pays an
    epoll_ctl(2) call each time its interest changes; this one never does.
  * Pausing is ours to undo.  When backpressure stops reading (output above
    the high-water mark) before EAGAIN, no new edge will announce the bytes
    still waiting.  They are read after the next send makes room: the send
    buffer filled (that is how output piled up), so an EPOLLOUT edge will
    come when the peer takes some, and the loop below reads again then.

  * Fairness is ours too.  A keep-alive client that sends its next request
    as soon as it reads an answer may never let its socket reach EAGAIN, and
    draining it "to EAGAIN" would serve it alone while every other
    connection waits (measured: 4 epoll_wait calls for 1000 requests from
    `ab -k -c 10`).  So a connection gets a budget of reads and sends per
    turn; one that spends it is put on a list of unfinished connections,
    served again on the next turn, and the wait does not block while that
    list is non-empty (no edge will come for bytes already there).  nginx
    and libuv bound their per-wakeup work the same way.

  * A deferred accept is ours to retry.  Out of descriptors, the accept
    loop stops before EAGAIN and the connections still queued will raise
    no new edge: waiting for one would leave them, and every client after
    them, unanswered forever.  So the listener stays registered (an edge
    costs nothing while it rests), the wait's timeout ends the rest, and
    the loop then accepts without an edge (Acceptor.retry_due).
"""

from __future__ import annotations

import select
import socket

from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import Connection

__all__ = ["serve"]

EDGE = select.EPOLLIN | select.EPOLLOUT | select.EPOLLET

# Reads and sends one connection may make per turn of the loop.
BUDGET = 16


def make_progress(conn: Connection, budget: int = BUDGET) -> bool:
    """Read and send on ``conn`` until both sides stop, or ``budget`` rounds are spent.

    Returns True if the budget ran out while the connection could still move
    (the caller must come back to it without waiting for an edge); False when
    each side hit EAGAIN, end of stream, an error, or backpressure.
    """
    # Whatever the edge said (in, out, error), make all the progress we can
    # on both sides; stop when neither moves.
    # exercise edge-triggered: begin
    for _ in range(budget):
        wrote = conn.wants_write and conn.on_writable()
        read = conn.wants_read and conn.on_readable()
        if not (wrote or read):
            return False
    return True
    # exercise edge-triggered: end


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with edge-triggered epoll.

    Runs until KeyboardInterrupt.
    """
    listener.setblocking(False)
    acceptor = Acceptor(listener, "epoll-et")
    ep = select.epoll()
    connections: dict[int, Connection] = {}   # fd -> its connection
    unfinished: dict[int, Connection] = {}    # fd -> a connection cut off by its budget
    try:
        ep.register(listener.fileno(), select.EPOLLIN | select.EPOLLET)
        while True:
            # Do not sleep while some connection still has work no edge will
            # announce, nor past the end of the listener's rest.
            rest = acceptor.rest_left()
            events = ep.poll(0 if unfinished else -1 if rest is None else rest)
            ready = [fd for fd, _ in events]
            if unfinished:
                ready += unfinished.keys() - set(ready)
            if acceptor.retry_due() and listener.fileno() not in ready:
                ready.append(listener.fileno())  # the rest is over: accept with no edge
            for fd in ready:
                if fd == listener.fileno():
                    if acceptor.rest_left() is not None:
                        continue  # an edge while resting: the retry will take it
                    for sock in acceptor.accept():  # until EAGAIN, or a new rest
                        conn = Connection(sock)
                        connections[conn.fd] = conn
                        ep.register(conn.fd, EDGE)
                    continue

                conn = connections[fd]
                if make_progress(conn):
                    unfinished[fd] = conn
                else:
                    unfinished.pop(fd, None)

                if conn.done:
                    ep.unregister(fd)  # before close(): EBADF after it
                    del connections[fd]
                    unfinished.pop(fd, None)
                    conn.close()
    finally:
        for conn in connections.values():
            conn.close()
        ep.close()
