"""The epoll server again, on kqueue(2), written the way kqueue is meant to
be used:

    kq = select.kqueue()                        # kqueue(2)
    changes.append(select.kevent(fd, KQ_FILTER_READ, KQ_EV_ADD))
    events = kq.control(changes, MAX_EVENTS)    # kevent(2): apply, then wait
    for event in events: ... event.ident, event.filter, event.flags, event.data

Three things change from epoll:
  * A registration is an (fd, filter) pair, not an fd.  Each connection gets
    two, a READ filter and a WRITE filter, added together when it is
    accepted (WRITE disabled), then switched with EV_ENABLE and EV_DISABLE.
    Write interest is enabled only while output waits: a connected socket is
    almost always writable, and a level-triggered WRITE filter left on would
    wake us for nothing, forever.
  * Changes are batched.  While we handle one round of events we append
    the changes they call for to a list, and the next control() call makes
    them all and then waits, in one system call.  The epoll server pays one
    epoll_ctl(2) per change on top of each epoll_wait(2).
  * close() deletes a descriptor's filters (kqueue(2)), so a finished
    connection is simply closed, with no EV_DELETE.  The other side of that
    coin: a change list must never name a descriptor we have closed, or, as
    the number is soon reused by accept(), a change meant for the old
    connection would land on the new one.  So a connection's changes are
    made after all of this round's events, and only if it stays open.

Out of descriptors, the listener's READ filter is disabled (EV_DISABLE)
for the Acceptor's rest, the wait's timeout ends the rest, and EV_ENABLE
brings it back, both in the change list like every other change: nginx's
ngx_disable_accept_events and its timer, without the timer.

kqueue exists on BSD and macOS.  On Linux, kqueue_api() gives the
emulation on epoll (tinyloop/raw/kqueue_emulation.py); the code below is
the same on both, and says at start-up which one it runs on.  (Emulated,
a batch saves nothing: control() makes each change with its own
epoll_ctl(2) before it waits.  The saving is a real kqueue's.)
"""

from __future__ import annotations

import os
import socket

from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import Connection
from tinyloop.raw.kqueue_emulation import kqueue_api
from tinyloop.serving import log

__all__ = ["serve"]

api, PLATFORM = kqueue_api()   # select itself, or the emulation: the same names either way

READ, WRITE = api.KQ_FILTER_READ, api.KQ_FILTER_WRITE
ADD, ENABLE, DISABLE, ERROR = api.KQ_EV_ADD, api.KQ_EV_ENABLE, api.KQ_EV_DISABLE, api.KQ_EV_ERROR

# At most this many events per control() call; the rest wait for the next one.
MAX_EVENTS = 1024


def interest_changes(conn: Connection, enabled: dict[int, tuple[bool, bool]]) -> list:
    """The changes that make ``conn``'s filters match what it wants now.

    ``enabled[conn.fd]`` is ``(read_on, write_on)``, the state the kernel has
    (or will have, once the pending changes are made); it is updated.
    Returns a list of kevents with EV_ENABLE or EV_DISABLE, one per filter
    whose state must change, and nothing for a filter already right: every
    change is work for the kernel.
    """
    # exercise kqueue-changes: begin
    changes = []
    wanted = (conn.wants_read, conn.wants_write)
    for filter, want, have in zip((READ, WRITE), wanted, enabled[conn.fd]):
        if want != have:
            changes.append(api.kevent(conn.fd, filter, ENABLE if want else DISABLE))
    enabled[conn.fd] = wanted
    return changes
    # exercise kqueue-changes: end


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with kqueue(2), until KeyboardInterrupt.

    Raises OSError if the kernel refuses a change (an EV_ERROR event): that
    is a bug in this loop, not something a peer can cause.
    """
    log(f"kqueue: using {PLATFORM}")
    listener.setblocking(False)
    acceptor = Acceptor(listener, "kqueue")
    listening = True                               # is the listener's READ filter enabled?
    kq = api.kqueue()
    connections: dict[int, Connection] = {}        # fd -> its connection
    enabled: dict[int, tuple[bool, bool]] = {}     # fd -> (READ enabled, WRITE enabled)
    changes = [api.kevent(listener.fileno(), READ, ADD)]   # made by the next control()
    try:
        while True:
            # While the listener rests after EMFILE its filter is off, and
            # the wait lasts at most the rest.
            rest = acceptor.rest_left()
            if listening != (rest is None):
                listening = not listening
                flag = ENABLE if listening else DISABLE
                changes.append(api.kevent(listener.fileno(), READ, flag))
            events = kq.control(changes, MAX_EVENTS, rest)   # make the changes, then wait
            changes = []
            handled: dict[int, Connection] = {}        # connections with events this round
            for event in events:
                fd = event.ident
                if event.flags & ERROR:
                    raise OSError(event.data, f"kqueue refused a change for fd {fd}: "
                                              f"{os.strerror(event.data)}")
                if fd == listener.fileno():
                    # event.data is how many connections wait; accept() takes them all.
                    for sock in acceptor.accept():
                        conn = Connection(sock)
                        connections[conn.fd] = conn
                        enabled[conn.fd] = (True, False)
                        changes.append(api.kevent(conn.fd, READ, ADD))
                        changes.append(api.kevent(conn.fd, WRITE, ADD | DISABLE))
                    continue

                # One event per filter: a socket both readable and writable
                # comes twice.  (EV_EOF with a READ event says the peer has
                # finished sending; on_readable finds that out by itself.)
                conn = connections[fd]
                if event.filter == WRITE:
                    if conn.wants_write:
                        conn.on_writable()
                elif conn.wants_read:
                    conn.on_readable()
                handled[fd] = conn

            for fd, conn in handled.items():
                if conn.done:
                    del connections[fd], enabled[fd]
                    conn.close()  # and its filters with it: no EV_DELETE
                else:
                    changes += interest_changes(conn, enabled)
    finally:
        for conn in connections.values():
            conn.close()
        kq.close()
