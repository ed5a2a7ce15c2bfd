"""What every stage's server does the same way, so no stage has to repeat it:
open the listening socket, say where it listens, and turn SIGTERM into the
same clean stop as Ctrl-C.
"""

from __future__ import annotations

import signal
import socket
import sys

__all__ = ["BACKLOG", "announce", "listen", "log", "stop_on_sigterm"]

# Large enough that `ab -c 100` never waits on the accept queue; the kernel
# caps it at net.core.somaxconn anyway.
BACKLOG = 1024


def listen(host: str = "127.0.0.1", port: int = 8000, *, backlog: int = BACKLOG) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` and listening; ``port=0`` picks a free port.

    ``SO_REUSEADDR`` lets a restarted server bind while old connections sit in
    TIME_WAIT.  The socket is left blocking; a readiness server makes it
    non-blocking itself, because that is part of its lesson.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def log(message: str) -> None:
    """One line on standard error, flushed at once (servers run under pipes)."""
    print(f"tinyloop: {message}", file=sys.stderr, flush=True)


def announce(stage: str, sock: socket.socket) -> None:
    """Print the line that tools wait for: ``... serving STAGE on http://HOST:PORT/``.

    It goes to standard output, flushed, after the socket listens, so a client
    that reads it can connect at once.
    """
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    print(f"tinyloop: serving {stage} on http://{host}:{port}/", flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread, as Ctrl-C does.

    A server then has one way to stop: the exception unwinds out of its
    blocking call (accept, select, epoll.poll) through ``finally`` blocks that
    close its sockets.
    """
    signal.signal(signal.SIGTERM, _interrupt)
