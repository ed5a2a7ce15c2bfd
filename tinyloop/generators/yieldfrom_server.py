"""Stage ``yieldfrom``: the generators server, with ``yield from`` doing the
calls and the yield-from scheduler running it.

This file is server.py with two changes: every call to a coroutine is
``yield from callee(...)`` instead of ``yield callee(...)``, and the tasks
run on YieldFromScheduler.  The code reads the same; what differs is who
keeps the stack (the interpreter, in the chain of suspended frames) and
what reaches the scheduler (traps only).  The coroutines are kept side by
side on purpose, as the chapter's pair of listings; what is not a
coroutine (``close_socket``) comes from Part I, as in server.py.

Rules this file keeps: those of server.py.
"""

from __future__ import annotations

import socket

from tinyloop.baseline.blocking import READ_SIZE
from tinyloop.generators.traps import Coroutine, read_wait, sleep, spawn, write_wait
from tinyloop.generators.yieldfrom import YieldFromScheduler
from tinyloop.http import HTTPConnection
from tinyloop.raw.accept import Acceptor
from tinyloop.raw.connection import close_socket

__all__ = ["accept_connections", "handle_connection", "recv", "sendall", "serve"]


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) until KeyboardInterrupt.

    On the way out every connection's task is closed, and with it its socket
    (:meth:`YieldFromScheduler.run` does that, then closes the reactor).
    """
    listener.setblocking(False)
    YieldFromScheduler().run(accept_connections(listener))


def accept_connections(listener: socket.socket) -> Coroutine:
    """The first task: wait for connections and start a task for each.

    Out of descriptors it sleeps through the Acceptor's rest instead of
    waiting on a listener that would be readable at once, again and again.
    """
    acceptor = Acceptor(listener, "yieldfrom")
    while True:
        yield from read_wait(listener)
        for sock in acceptor.accept():  # non-blocking, TCP_NODELAY
            yield from spawn(handle_connection(sock))
        rest = acceptor.rest_left()
        if rest is not None:
            yield from sleep(rest)


def handle_connection(sock: socket.socket) -> Coroutine:
    """Serve one client until HTTP says to close, it closes, or it resets."""
    http = HTTPConnection()
    graceful = True
    try:
        while not http.should_close:
            data = yield from recv(sock, READ_SIZE)  # b"" at end of stream
            response = http.receive_data(data)
            if response:
                yield from sendall(sock, response)
    except ConnectionError:
        graceful = False  # ECONNRESET, EPIPE: the client is gone, nobody to answer
    finally:
        close_socket(sock, graceful)


def recv(sock: socket.socket, max_bytes: int) -> Coroutine:
    """Wait until ``sock`` is readable, then return up to ``max_bytes`` bytes (b"" at EOF).

    Raises ConnectionResetError and friends as ``socket.recv`` does.
    """
    while True:
        yield from read_wait(sock)
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
            yield from write_wait(sock)
        else:
            view = view[sent:]
