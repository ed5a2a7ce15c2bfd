"""What every stage's server does the same way, so no stage has to repeat it:
open the listening socket, say where it listens, and turn SIGTERM into the
same clean stop as Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

__all__ = ["BACKLOG", "NUDGER_NAME", "announce", "listen", "log", "stop_on_sigterm"]

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


# Set by the first SIGTERM's handler: the stop is under way (see stop_on_sigterm).
_stopping = False

# How long the nudger waits for the main thread to run the handler before it
# interrupts the main thread's system call again, in seconds; and how many
# times it tries.
NUDGE_INTERVAL = 0.05
NUDGES = 200

# The nudging thread's name as the kernel shows it (/proc/PID/task/TID/comm,
# ps -L; at most 15 bytes): tools that count a server's threads leave it out.
NUDGER_NAME = "tinyloop-signal"


def _interrupt(signum: int, frame: object) -> None:
    global _stopping
    if _stopping:
        return  # a later SIGTERM (or a nudge) must not break the clean-up under way
    _stopping = True
    raise KeyboardInterrupt(f"signal {signum}")


def _nudge(wakeup: int, main: int) -> None:
    """Read the signals' wake-up bytes; after a SIGTERM, interrupt ``main`` until it handles it."""
    while caught := os.read(wakeup, 512):
        if signal.SIGTERM not in caught:
            continue
        for _ in range(NUDGES):
            time.sleep(NUDGE_INTERVAL)
            if _stopping:
                break
            signal.pthread_kill(main, signal.SIGTERM)


def stop_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread, as Ctrl-C does.

    A server then has one way to stop: the exception unwinds out of its
    blocking call (accept, select, epoll.poll) through ``finally`` blocks that
    close its sockets.  Only the first SIGTERM raises; later ones do nothing,
    so they cannot break the clean-up (SIGKILL is the way to insist).  Call it
    once, from the main thread, before the server starts; it starts a daemon
    thread that blocks SIGTERM and SIGINT, and sets the signal module's
    wake-up descriptor (a loop that sets its own, as Part IV's does while it
    runs, watches that one instead).  Raises ``ValueError`` from another
    thread (signal.signal(2) handlers are the main thread's).

    Discussion: why a thread, when a signal interrupts a blocking system call
    anyway (EINTR)?  Because of a race.  Python's handler runs in the main
    thread, between two bytecodes; the C-level handler only notes the signal.
    If SIGTERM lands after the interpreter's last look at that note and
    before the thread enters accept(2) or epoll_wait(2), nothing interrupts
    the call: the server sleeps until a timer (the idle timeout, 10 s) or a
    client wakes it, or for ever.  It also misses when the kernel hands the
    signal to some other thread.  It is rare (a preemption inside a window a
    few instructions wide), so it shows on a loaded machine: CI's.  C closes the
    window atomically with pselect(2), ppoll(2) and epoll_pwait(2), which
    unblock the signal only inside the wait; asyncio watches a self-pipe the
    signal's byte is written to (signal.set_wakeup_fd).  Neither fits a
    blocking accept(), so a thread reads those bytes and interrupts the main
    thread's call with pthread_kill(3) until the handler has run.
    """
    global _stopping
    _stopping = False
    signal.signal(signal.SIGTERM, _interrupt)
    wakeup, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C handler must never block on it
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    # The thread inherits this mask: it never takes SIGTERM or SIGINT itself.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        nudger = threading.Thread(target=_nudge, args=(wakeup, threading.get_ident()), daemon=True,
                                  name=NUDGER_NAME)
        nudger.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    # Named before the server starts, so no one counting threads sees it unnamed.  (No
    # O_TRUNC: any write replaces a comm file, and a check's guard allows the call.)
    try:
        comm = os.open(f"/proc/self/task/{nudger.native_id}/comm", os.O_WRONLY)
        try:
            os.write(comm, NUDGER_NAME.encode())
        finally:
            os.close(comm)
    except OSError:
        pass  # no /proc (another OS, a sandbox without it): the thread keeps its inherited name
