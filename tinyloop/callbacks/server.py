"""Stage ``callbacks``: the HTTP server written as callbacks on the reactor.

Compare the epoll server of Part I.  Its loop did three jobs: wait for
readiness, find the connection behind each ready descriptor, and keep the
kernel's interest list in step with what each connection wants.  The
reactor (loop.py) now does the first two, and this file states only the
third, once per connection, as callbacks:

    listener readable  ->  Listener._on_acceptable: accept, make a Client per socket
    client readable    ->  Client._on_readable: recv, answer, try to send
    client writable    ->  Client._on_writable: send what is left

Each callback ends in ``Client._update``, which asks the connection what it
wants next and adds or removes the reader and the writer to match.

Rules this file keeps:
  * What one connection does with a ready socket is Part I's
    ``tinyloop.raw.connection.Connection``, imported, not rewritten: partial
    writes, a reused receive buffer, errors that close only this peer.
  * Write interest only while output is waiting (a connected socket is
    almost always writable: asking otherwise wakes the loop for nothing).
    Read interest only while output is below the high-water mark
    (backpressure: a client that does not read stops being read from).
  * A descriptor leaves the selector before its socket is closed: the
    kernel reuses the number for the next accept.
  * An idle keep-alive client is dropped after IDLE_TIMEOUT seconds, with
    one timer per connection that is re-armed, never cancelled, on activity.
  * Out of descriptors, the listener leaves the selector and a timer brings
    it back (asyncio's remedy; see Listener): the loop never spins on a
    listener it cannot accept from.
  * Ctrl-C and SIGTERM arrive as KeyboardInterrupt out of run_forever;
    ``serve`` then closes every connection, the listener's registration and
    the loop, in ``finally``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from tinyloop.baseline.blocking import IDLE_TIMEOUT
from tinyloop.callbacks.loop import Loop, TimerHandle
from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import Connection

__all__ = ["Client", "HTTPServer", "Listener", "serve"]


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) until KeyboardInterrupt, then close all."""
    loop = Loop()
    server = HTTPServer(loop, listener)
    try:
        server.start()
        loop.run_forever()
    finally:
        server.close()
        loop.close()


class Listener:
    """Calls ``on_connection(sock)`` for every connection accepted on ``sock`` (bound, listening).

    ``name`` (the stage) prefixes log lines.  :meth:`start` registers the
    accept callback on ``loop``; :meth:`close` unregisters it and cancels a
    pending retry (the socket itself belongs to the caller).  The sockets
    given to ``on_connection`` are non-blocking, with TCP_NODELAY.  Used by
    this server and by the streams of Part II (``tinyloop.coroutines.streams``).
    """

    def __init__(self, loop: Loop, sock: socket.socket, name: str,
                 on_connection: Callable[[socket.socket], object]) -> None:
        self.loop = loop
        self.sock = sock
        self.on_connection = on_connection
        self.acceptor = Acceptor(sock, name, clock=loop.time)
        self.retry: TimerHandle | None = None   # the timer that ends a rest, while one runs

    def start(self) -> None:
        """Watch the socket for connections (again, when called by the timer that ends a rest)."""
        self.retry = None
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock, self._on_acceptable)

    def _on_acceptable(self) -> None:
        """Accept all that waits; out of descriptors, rest.

        Discussion: the reactor is level-triggered (its selector is epoll,
        kqueue, poll or select, all level-triggered here).  A listener we
        cannot accept from stays readable, and would bring us back at once
        on every iteration, forever.  So while the Acceptor rests, the
        listener is out of the selector, and a timer puts it back: this is
        what asyncio's ``_accept_connection`` does, with the same delay.
        """
        for sock in self.acceptor.accept():   # until EAGAIN, or a new rest
            self.on_connection(sock)
        rest = self.acceptor.rest_left()
        if rest is not None:
            self.loop.remove_reader(self.sock)
            self.retry = self.loop.call_later(rest, self.start)

    def close(self) -> None:
        """Stop accepting: unregister, and cancel a pending retry (idempotent)."""
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        self.loop.remove_reader(self.sock)


class HTTPServer:
    """Accept connections on ``listener`` and serve each with a :class:`Client`.

    ``start()`` registers the accept callback; ``close()`` unregisters it and
    closes every open connection (the listener itself belongs to the caller).
    """

    def __init__(self, loop: Loop, listener: socket.socket, *, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.loop = loop
        self.listener = Listener(loop, listener, "callbacks", self._on_connection)
        self.idle_timeout = idle_timeout
        self.clients: set[Client] = set()

    def start(self) -> None:
        self.listener.start()

    def _on_connection(self, sock: socket.socket) -> None:
        self.clients.add(Client(self, sock))

    def close(self) -> None:
        self.listener.close()
        for client in list(self.clients):
            client.close()


class Client:
    """The callbacks of one connection: a :class:`~tinyloop.raw.connection.Connection` on the reactor."""

    def __init__(self, server: HTTPServer, sock: socket.socket) -> None:
        self.server = server
        self.loop = server.loop
        self.conn = Connection(sock)
        self.reading = False      # is our reader registered?
        self.writing = False      # is our writer registered?
        self.last_active = self.loop.time()
        self.idle_timer: TimerHandle | None = self.loop.call_later(server.idle_timeout,
                                                                   self._on_idle_timer)
        self._update()

    def _on_readable(self) -> None:
        if self.conn.on_readable():
            self.last_active = self.loop.time()
        self._update()

    def _on_writable(self) -> None:
        if self.conn.on_writable():
            self.last_active = self.loop.time()
        self._update()

    def _update(self) -> None:
        """Register exactly the readiness the connection wants now; close it when done."""
        # exercise callback-interest: begin
        conn = self.conn
        if conn.done:
            self.close()
            return
        if conn.wants_read != self.reading:
            if conn.wants_read:
                self.loop.add_reader(conn.fd, self._on_readable)
            else:
                self.loop.remove_reader(conn.fd)  # backpressure: stop reading
            self.reading = conn.wants_read
        if conn.wants_write != self.writing:
            if conn.wants_write:
                self.loop.add_writer(conn.fd, self._on_writable)
            else:
                self.loop.remove_writer(conn.fd)
            self.writing = conn.wants_write
        # exercise callback-interest: end

    def _on_idle_timer(self) -> None:
        """Drop the client if it has been idle IDLE_TIMEOUT seconds; else look again later.

        Discussion: re-arming one timer when it fires, instead of cancelling
        and rescheduling it on every read, keeps a busy connection from
        pushing a dead timer into the heap per request.  A timer fires at
        most ``idle_timeout`` late, which is the precision we need.
        """
        idle = self.loop.time() - self.last_active
        if idle >= self.server.idle_timeout:
            self.idle_timer = None
            self.close()
        else:
            left = self.server.idle_timeout - idle
            self.idle_timer = self.loop.call_later(left, self._on_idle_timer)

    def close(self) -> None:
        """Unregister, then close the socket (idempotent)."""
        if self not in self.server.clients:
            return
        self.server.clients.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.loop.remove_reader(self.conn.fd)
        self.loop.remove_writer(self.conn.fd)
        self.conn.close()
