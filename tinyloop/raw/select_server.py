"""One thread, many clients, on select(2): the oldest readiness call.

    readable, writable, _ = select.select(readers, writers, [], timeout)

We hand the kernel three sets of descriptors; it blocks until at least one
is ready (readable: data, EOF or a pending connection; writable: room in
the send buffer), and hands back the ready ones.  No socket call of ours
then blocks, because we only make the calls the kernel just said will not.

What it costs (select(2), "BUGS" and "NOTES"):
  * The kernel keeps no interest list.  We rebuild the sets on every call,
    the kernel copies them in and scans every descriptor, and we scan the
    results: O(n) in the number of connections, ready or not.
  * An fd_set is a bit array of FD_SETSIZE (1024) bits.  A descriptor
    numbered 1024 or more cannot be put in one at all (C code would write
    past the array; Python raises ValueError).  So this server refuses, with
    a log line, any connection whose descriptor is that high, and goes on
    serving the others.  poll(2) lifts this limit; epoll(7) lifts the scan.

select is level-triggered: a socket is reported for as long as it is ready,
so reading 64 KiB of a larger request is fine; the rest is reported again.
The listener too: while the process is out of descriptors it stays
readable, so the loop leaves it out of the read set for a rest, and
select's timeout (its only clock) ends the rest.  See tinyloop/raw/accept.py.
"""

from __future__ import annotations

import select
import socket

from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import Connection
from tinyloop.serving import log

__all__ = ["FD_SETSIZE", "serve"]

FD_SETSIZE = 1024  # glibc's fixed size of an fd_set, in descriptors


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with select(2).

    Runs until KeyboardInterrupt.
    """
    listener.setblocking(False)
    acceptor = Acceptor(listener, "select")
    connections: set[Connection] = set()
    try:
        while True:
            # The interest sets, rebuilt every time: select keeps no state.
            # Write interest only while output waits, read interest only
            # while we will read (see Connection.wants_read: backpressure).
            readers = [c for c in connections if c.wants_read]
            # The listener only while it is not resting after EMFILE, and
            # then the wait lasts at most the rest (None: no timeout).
            # exercise accept-backoff: begin
            timeout = acceptor.rest_left()
            if timeout is None:
                readers.append(listener)
            # exercise accept-backoff: end
            writers = [c for c in connections if c.wants_write]
            readable, writable, _ = select.select(readers, writers, [], timeout)

            for conn in writable:
                conn.on_writable()
            for conn in readable:
                if conn is listener:
                    _accept(acceptor, connections)
                elif conn.wants_read:  # still: a failed write may have ended it
                    conn.on_readable()
            for conn in {*readable, *writable} - {listener}:
                if conn.done:
                    connections.discard(conn)
                    conn.close()  # nothing to unregister: select has no memory
    finally:
        for conn in connections:
            conn.close()


def _accept(acceptor: Acceptor, connections: set[Connection]) -> None:
    for sock in acceptor.accept():
        # exercise fd-setsize: begin
        fd = sock.fileno()
        if fd >= FD_SETSIZE:
            log(f"select: refusing a connection: descriptor {fd} >= FD_SETSIZE ({FD_SETSIZE}),"
                " which select(2) cannot watch")
            sock.close()
        else:
            connections.add(Connection(sock))
        # exercise fd-setsize: end
