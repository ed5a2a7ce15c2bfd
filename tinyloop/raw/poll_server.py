"""The select server again, on poll(2):

    poller.register(fd, POLLIN)      # interest in one descriptor
    poller.modify(fd, POLLIN | POLLOUT)
    poller.unregister(fd)
    for fd, events in poller.poll(timeout_ms): ...

poll takes an array of (fd, events) pairs instead of three bit sets, so any
descriptor number works: no FD_SETSIZE.  Python's poll object keeps that
array between calls, so we register and modify interest as it changes
instead of rebuilding sets.  But the kernel still keeps nothing: every call
copies the whole array in, checks every descriptor and copies it back, so
one wakeup still costs O(n) in the number of connections, however few are
ready.  epoll(7) is the fix.

poll is level-triggered, like select: a descriptor is reported for as long
as it is ready.  The loop is ``serve_with``, written against the methods
poll and epoll share, because epoll_server.py runs it unchanged.  POLLHUP and POLLERR are reported whether asked for or not
(poll(2)); we let the next recv or send find out what happened.

Level-triggered also means a listener we cannot accept from (out of
descriptors) is reported on every call.  So while the Acceptor rests, the
listener is unregistered, and the wait's timeout, the only clock this
loop has, says when to register it again (see tinyloop/raw/accept.py).
"""

from __future__ import annotations

import select
import socket

from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import Connection

__all__ = ["serve", "serve_with"]

IN, OUT, ERR = select.POLLIN, select.POLLOUT, select.POLLERR | select.POLLHUP


def _interest(conn: Connection) -> int:
    """The events to wait for on ``conn``: read and write interest as it wants them."""
    return (IN if conn.wants_read else 0) | (OUT if conn.wants_write else 0)


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with poll(2), until KeyboardInterrupt."""
    serve_with(select.poll(), listener)


def wait(poller: select.poll | select.epoll, seconds: float | None) -> list[tuple[int, int]]:
    """``poller.poll`` for at most ``seconds`` (None: until an event): ``[(fd, events), ...]``.

    The one place where the two objects differ for this loop: poll(2) and
    epoll_wait(2) both count their timeout in milliseconds, but Python's
    ``epoll.poll`` takes seconds, as ``select.select`` does.
    """
    if seconds is None:
        return poller.poll()
    return poller.poll(seconds if isinstance(poller, select.epoll) else seconds * 1000)


def serve_with(poller: select.poll | select.epoll, listener: socket.socket,
               name: str = "poll") -> None:
    """Serve HTTP on ``listener`` with ``poller``, any object with poll's methods.

    ``poller`` is a new ``select.poll()`` or a level-triggered
    ``select.epoll()``: both take ``register(fd, events)``, ``modify``,
    ``unregister`` and ``poll()`` (blocking when given no timeout), and
    epoll's event bits have poll's values (EPOLLIN == POLLIN and so on, as
    <sys/epoll.h> defines them; epoll_server.py checks it).  ``name`` (the
    stage) prefixes log lines.  Runs until KeyboardInterrupt; closes every connection it
    accepted, but not ``poller`` or ``listener``, which the caller owns.
    """
    listener.setblocking(False)
    acceptor = Acceptor(listener, name)
    listening = False                         # is the listener registered?
    connections: dict[int, Connection] = {}   # fd -> its connection
    interest: dict[int, int] = {}             # fd -> the events registered for it
    try:
        while True:
            # The listener leaves the interest list while it rests after
            # EMFILE, and returns when the rest, the wait's timeout, is over.
            rest = acceptor.rest_left()
            if listening != (rest is None):
                if listening:
                    poller.unregister(listener.fileno())
                else:
                    poller.register(listener.fileno(), IN)
                listening = not listening

            for fd, events in wait(poller, rest):
                if fd == listener.fileno():
                    for sock in acceptor.accept():
                        conn = Connection(sock)
                        connections[conn.fd] = conn
                        interest[conn.fd] = IN
                        poller.register(conn.fd, IN)
                    continue

                conn = connections[fd]
                if events & (OUT | ERR) and conn.wants_write:
                    conn.on_writable()
                if events & (IN | ERR) and conn.wants_read:
                    conn.on_readable()

                if conn.done:
                    poller.unregister(fd)  # before close(): epoll says EBADF after it,
                    # and the number is soon reused by the next accept
                    del connections[fd], interest[fd]
                    conn.close()
                elif (wanted := _interest(conn)) != interest[fd]:
                    poller.modify(fd, wanted)
                    interest[fd] = wanted
    finally:
        for conn in connections.values():
            conn.close()
