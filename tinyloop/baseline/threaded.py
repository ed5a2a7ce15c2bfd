"""The honest synchronous baseline: a thread per connection, blocking calls in
each.  The main thread only accepts; every client gets a thread that runs
the blocking server's own per-client code, so a slow client now blocks only
its own thread.

Rules this file keeps:
  * Nothing is shared between threads but the listener, which only the main
    thread touches; each thread owns its socket and closes it.
  * Threads are daemons: Ctrl-C (or SIGTERM) stops the main thread's
    accept(), and the process exits without waiting for clients.  The
    kernel closes the sockets the dying threads still hold.
  * Client threads block SIGINT and SIGTERM, so the kernel delivers them to
    the main thread, the one whose accept() they must interrupt.

Discussion: when a handler computes instead of waiting, this is hard to
beat on latency: the OS preempts threads, and the GIL is handed over every
switch interval, so a slow handler delays the others only briefly.  Its
costs: a thread started per connection; memory (each thread reserves a
stack; see the readiness chapter for many idle clients on one thread); and
the GIL, which lets one thread run Python at a time, so many busy threads
queue for it and its tail latency under keep-alive is worse than a loop's.
The idle timeout inherited from the blocking server frees the thread of a
client that stays silent.

Discussion: this is the Part 0 server that meets the descriptor limit, a
descriptor per client being all it takes.  Its accept goes through the
blocking server's Doorman, whose spare descriptor turns clients away
while the process is full, and which raises nothing but a closed
listener's errors: an exception out of this loop would stop the process,
and with it every client it serves.
"""

from __future__ import annotations

import signal
import socket
import threading

from tinyloop.baseline.blocking import Doorman, serve_client
from tinyloop.serving import log

__all__ = ["serve"]


# Discussion: a signal sent to a process goes to any one of its threads that
# does not block it (signal(7)), and Python runs its handler in the main
# thread only.  Had a client thread, waiting in recv(), taken the SIGTERM,
# the handler would wait for the main thread to run bytecode, and the main
# thread would wait in accept() for the next client: the server would not
# stop.  A thread starts with its creator's signal mask (pthread_sigmask(3)),
# so the stop signals are blocked around its start and stay blocked in it.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _serve_and_close(sock: socket.socket) -> None:
    with sock:
        serve_client(sock)


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening, blocking) with a thread per connection.

    Runs until KeyboardInterrupt (Ctrl-C, or SIGTERM through the CLI).
    At the descriptor limit it refuses new clients: see
    :class:`~tinyloop.baseline.blocking.Doorman`.
    """
    doorman = Doorman("threaded")
    try:
        while True:
            sock, address = doorman.accept(listener)
            # The thread started below inherits this mask (see _STOP_SIGNALS).
            # A signal sent meanwhile waits, and arrives when it is lifted.
            unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            # exercise thread-per-connection: begin
            thread = threading.Thread(target=_serve_and_close, args=(sock,),
                                      name=f"client-{address[0]}:{address[1]}", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # the OS will not give us another thread
                log("threaded: cannot start a thread; closing the new connection")
                sock.close()
            # exercise thread-per-connection: end
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
    finally:
        doorman.close()
