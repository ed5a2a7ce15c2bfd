"""Stage ``generators``: the HTTP server as straight-line code again, one task
per connection, on the stack scheduler.

Compare the callbacks server: there, one connection's life is cut into
callbacks (readable, writable) that share state through an object.  Here it
is one loop in one generator, read top to bottom: wait, receive, answer,
send, again.  The scheduler cuts it at each ``yield`` for us.

Rules this file keeps:
  * A coroutine calls another by yielding it (``data = yield recv(sock)``)
    and waits by yielding a trap function's generator (``yield
    read_wait(sock)``); the stack scheduler makes both work.  There is no
    ``yield from`` in this file: yieldfrom_server.py is this file with it.
  * Every socket is closed by the task that owns it, in ``finally``: after
    the last response is sent, at end of stream, on a reset, and when the
    scheduler closes the task at shutdown.
  * One recv per wake-up, at most READ_SIZE (64 KiB) bytes; output is sent
    whole before the next read, so a client that does not read stops being
    read from (backpressure through TCP's window), and stalls only its task.
"""

from __future__ import annotations

import socket

from tinyloop.baseline.blocking import READ_SIZE
from tinyloop.generators.scheduler import Scheduler
from tinyloop.generators.traps import Coroutine, read_wait, sleep, spawn, write_wait
from tinyloop.http import HTTPConnection
from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import close_socket

__all__ = ["accept_connections", "handle_connection", "recv", "sendall", "serve"]


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) until KeyboardInterrupt.

    On the way out every connection's task is closed, and with it its socket
    (:meth:`Scheduler.run` does that, then closes the reactor).
    """
    listener.setblocking(False)
    Scheduler().run(accept_connections(listener))


def accept_connections(listener: socket.socket) -> Coroutine:
    """The first task: wait for connections and start a task for each.

    Out of descriptors it sleeps through the Acceptor's rest instead of
    waiting on a listener that would be readable at once, again and again.
    """
    acceptor = Acceptor(listener, "generators")
    while True:
        yield read_wait(listener)
        for sock in acceptor.accept():  # non-blocking, TCP_NODELAY
            yield spawn(handle_connection(sock))
        rest = acceptor.rest_left()
        if rest is not None:
            yield sleep(rest)


def handle_connection(sock: socket.socket) -> Coroutine:
    """Serve one client until HTTP says to close, it closes, or it resets."""
    http = HTTPConnection()
    graceful = True
    try:
        while not http.should_close:
            data = yield recv(sock, READ_SIZE)   # b"" at end of stream
            response = http.receive_data(data)
            if response:
                yield sendall(sock, response)
    except ConnectionError:
        graceful = False  # ECONNRESET, EPIPE: the client is gone, nobody to answer
    finally:
        close_socket(sock, graceful)


def recv(sock: socket.socket, max_bytes: int) -> Coroutine:
    """Wait until ``sock`` is readable, then return up to ``max_bytes`` bytes (b"" at EOF).

    Raises ConnectionResetError and friends as ``socket.recv`` does.
    """
    while True:
        yield read_wait(sock)
        try:
            return sock.recv(max_bytes)
        except BlockingIOError:
            continue  # readiness was stale (another reader took the data): wait again


def sendall(sock: socket.socket, data: bytes) -> Coroutine:
    """Send all of ``data``, waiting for write readiness whenever the kernel's buffer is full.

    Returns None once the kernel holds every byte.  Raises BrokenPipeError,
    ConnectionResetError and friends as ``socket.send`` does.
    """
    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view)  # may take fewer bytes than offered: a partial write
        except BlockingIOError:
            yield write_wait(sock)
        else:
            view = view[sent:]
