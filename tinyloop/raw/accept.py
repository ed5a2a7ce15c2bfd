"""Accepting on a non-blocking listener, for every readiness server (select,
poll, epoll, epoll-et, kqueue) and every loop of Part II: take every
connection that waits, and when the process runs out of descriptors, rest.

Rules this file keeps:
  * Accept until EAGAIN.  One readiness report on a listener may stand for
    many queued connections; taking them all saves a wait for each, and an
    edge-triggered server must (no new edge comes for those already queued).
  * Out of descriptors is "not now", never a crash and never a spin.  On
    EMFILE, ENFILE, ENOBUFS or ENOMEM the Acceptor starts a *rest* of
    ACCEPT_RETRY_DELAY seconds and says when it ends; the server leaves the
    listener out of its wait until then (asyncio's remedy).  How it waits
    is the server's business: Part I's servers have no timers, so they
    pass the rest as their system call's timeout; Part II's set a timer.
  * One log line when an episode begins and one when it ends, whatever
    the number of retries between.

Discussion: why rest at all?  A level-triggered listener with connections
queued is readable, whether or not we can accept them.  At EMFILE accept
leaves them queued, so every wait returns at once, reporting the same
listener, and the server spins a core doing nothing but failing to accept,
while its own clients wait behind it.  Taking the listener out of the
interest set stops the reports; the rest's timeout brings it back.  Edge-
triggered epoll does not spin, but fails the other way: the connections
left queued raise no new edge, so it must retry on its own when the rest
is over.  The readiness chapter measures both, and compares the remedies of
asyncio, libuv and nginx.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable

from tinyloop.baseline.blocking import ACCEPT_RETRY_DELAY, OUT_OF_RESOURCES
from tinyloop.raw.connection import prepare
from tinyloop.serving import log

__all__ = ["ACCEPT_RETRY_DELAY", "NEXT_ONE", "OUT_OF_RESOURCES", "Acceptor"]

# accept(2) errors that belong to one queued connection, not to the listener:
# the client reset before we took it (ECONNABORTED), a firewall refused it
# (EPERM), or, on Linux, a network error already pending on the new socket,
# which accept(2), "Error handling", says to treat like EAGAIN by retrying.
# (By name, because not every system has every one: ENONET is Linux's.)
NEXT_ONE = frozenset(getattr(errno, name) for name in (
    "ECONNABORTED", "EINTR", "EPERM", "EPROTO", "ENETDOWN", "ENOPROTOOPT", "EHOSTDOWN",
    "ENONET", "EHOSTUNREACH", "EOPNOTSUPP", "ENETUNREACH") if hasattr(errno, name))


class Acceptor:
    """A non-blocking listener's accept loop, and the rest it takes when out of descriptors.

    ``listener`` is a bound, listening, non-blocking socket; ``name`` (the
    stage) prefixes the log lines; ``delay`` is the rest, in seconds;
    ``clock`` returns seconds (``time.monotonic``, or a test's clock).
    """

    def __init__(self, listener: socket.socket, name: str, *, delay: float = ACCEPT_RETRY_DELAY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.listener = listener
        self.name = name
        self.delay = delay
        self.clock = clock
        self.until: float | None = None   # when the rest ends, by clock(); None: not in an episode

    def accept(self) -> list[socket.socket]:
        """Accept every connection waiting, until EAGAIN or a lack of descriptors.

        Returns the new sockets, already through :func:`~tinyloop.raw.connection.prepare`
        (non-blocking, TCP_NODELAY); possibly none.  On EMFILE, ENFILE,
        ENOBUFS or ENOMEM (accept(2)) it starts a rest (see :meth:`rest_left`)
        and returns what it has.  Raises OSError for any other error of
        accept's, which means the listener itself is broken (EBADF, EINVAL).
        """
        accepted = []
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                break                     # EAGAIN: the queue is empty
            except OSError as exc:
                if exc.errno in NEXT_ONE:
                    continue
                if exc.errno not in OUT_OF_RESOURCES:
                    raise
                self._rest(exc)
                return accepted
            accepted.append(prepare(sock))
        if self.until is not None:       # the first accept since the episode began
            self.until = None
            log(f"{self.name}: accepting connections again")
        return accepted

    def _rest(self, exc: OSError) -> None:
        if self.until is None:           # log the start of an episode, not every retry
            log(f"{self.name}: accept failed ({exc.strerror}); not accepting for"
                f" {self.delay:g} s at a time until descriptors free up")
        self.until = self.clock() + self.delay

    def rest_left(self) -> float | None:
        """Seconds the listener has still to rest, or None if the server should accept now.

        None both when no episode runs and when its rest is over: the server
        then watches the listener again (and an edge-triggered server
        accepts at once, see :meth:`retry_due`).  A positive float is the
        timeout to give the server's wait.
        """
        if self.until is None:
            return None
        left = self.until - self.clock()
        return left if left > 0 else None

    def retry_due(self) -> bool:
        """True when a rest is over and no accept has been tried since.

        An edge-triggered server's cue: the connections left queued will
        raise no edge, so it must call :meth:`accept` itself.  Either outcome
        of that call (some accepted, or a new rest) makes this False again.
        """
        return self.until is not None and self.rest_left() is None
