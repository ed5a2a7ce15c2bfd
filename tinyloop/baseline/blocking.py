"""The simplest server that works: accept one client, serve it until it
leaves, then accept the next.  Every call blocks, so the code reads like
the protocol: read, answer, read again.

Its lesson is what it cannot do.  While one client is connected, nobody
else is served: a second client's connection waits in the kernel's accept
queue, finished by the kernel's handshake but never read.  One slow client
(or one that keeps its connection alive and idle) holds up everyone.  The
idle timeout below only bounds *how long*: a client that sends nothing for
IDLE_TIMEOUT seconds is dropped, so the server cannot hang forever, but it
still serves one client at a time.  The threaded server is the classic fix;
the readiness servers of Part I are the other.

At the descriptor limit (EMFILE) a blocking accept() fails at once, before
it waits for a connection: a loop that retried it would spin.  Both Part 0
servers accept through ``Doorman``, which keeps one descriptor in reserve
to turn the waiting clients away with, and never spins.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import Any

from tinyloop.http import HTTPConnection
from tinyloop.serving import log

__all__ = ["ACCEPT_RETRY_DELAY", "IDLE_TIMEOUT", "OUT_OF_RESOURCES", "READ_SIZE", "Doorman",
           "serve", "serve_client"]

# At most this many bytes per recv, into a buffer allocated once per client.
# Discussion: a larger read is not faster.  glibc's malloc serves requests
# above its mmap threshold (128 KiB by default, see mallopt(3)) with a fresh
# mmap(2), so a 256 KiB recv() into a new bytes object costs three extra
# system calls on every read (mmap, mremap(2) when CPython shrinks the object
# to the bytes that arrived, munmap(2) when it is freed) and page faults.
# 64 KiB stays below the threshold, and recv_into() a reused buffer
# allocates nothing at all.
READ_SIZE = 64 * 1024

# Seconds a client may go without sending (or taking) a byte before we drop it.
IDLE_TIMEOUT = 10.0

# accept(2) errors that mean "not now" rather than "never": this process
# (EMFILE) or the whole system (ENFILE) is out of descriptors, or the kernel
# out of memory for a socket (ENOBUFS, ENOMEM).  They pass when some
# connection closes, so a server waits and tries again.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

# Seconds to wait before accepting again after one of them: asyncio's
# constants.ACCEPT_RETRY_DELAY.  Short enough that a client who arrives as
# descriptors free up is served within a second or so; long enough that the
# retries cost nothing.
ACCEPT_RETRY_DELAY = 1.0

# accept(2) errors on a listener that is gone: closed under us (EBADF,
# ENOTSOCK) or no longer listening (EINVAL).  No wait makes them pass.
_LISTENER_GONE = frozenset({errno.EBADF, errno.ENOTSOCK, errno.EINVAL})


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening, blocking), one client at a time.

    Runs until KeyboardInterrupt (Ctrl-C, or SIGTERM through the CLI), which
    unwinds out of ``accept()`` or out of the client being served.
    """
    doorman = Doorman("blocking")
    try:
        while True:
            sock, _ = doorman.accept(listener)
            with sock:  # closed whatever happens, KeyboardInterrupt included
                serve_client(sock)
    finally:
        doorman.close()


def serve_client(sock: socket.socket, idle_timeout: float = IDLE_TIMEOUT) -> None:
    """Serve one connected client with blocking calls until it leaves.

    Returns when HTTP says to close (``Connection: close``, a malformed
    request, end of stream), when the peer resets, or when it has been idle
    for ``idle_timeout`` seconds.  Does not close ``sock``: the caller does.
    """
    sock.settimeout(idle_timeout)  # each recv/send waits at most this long
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    http = HTTPConnection()
    buffer = bytearray(READ_SIZE)
    view = memoryview(buffer)
    try:
        while not http.should_close:
            n = sock.recv_into(buffer)  # n == 0: the client finished sending
            response = http.receive_data(bytes(view[:n]))
            if response:
                sock.sendall(response)
        # Send FIN after the last response, so the client reads all of it.
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        # TimeoutError (idle too long), ECONNRESET, EPIPE: drop this client.
        pass


class Doorman:
    """Blocking ``accept`` that survives the descriptor limit: a spare descriptor, and patience.

    ``name`` (the stage) prefixes the log lines.  :meth:`accept` returns the
    next connection; :meth:`close` gives the spare back.

    Discussion: a process at its limit on open files (RLIMIT_NOFILE, see
    getrlimit(2)) gets EMFILE from accept(2), and the client stays in the
    kernel's accept queue, connected but unanswered, until it gives up.  The
    remedy here is libuv's and libev's: keep one descriptor open in reserve
    (on /dev/null; any file would do), and when accept fails with EMFILE or
    ENFILE, close it, which makes room for exactly one more; accept the
    waiting client into that room; and open the spare again.  If the spare
    cannot be reopened we really are full, so the client is closed at once
    (it sees its connection closed, not a silent queue) and the spare takes
    its place; if it can, a descriptor has been freed meanwhile and the
    client is served.  Errors a spare cannot cure (ENOBUFS, ENOMEM, a spare
    lost to another thread) get a wait of ACCEPT_RETRY_DELAY seconds
    instead: a blocking accept that fails at once must never be retried at
    once, or the loop spins.  Either way the server logs once per episode
    (when the trouble starts, and when an accept succeeds again), not once
    per client.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.spare: int | None = self._open_spare()
        self.trouble = False    # in an episode: since a failed accept, none has succeeded

    @staticmethod
    def _open_spare() -> int | None:
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None         # out of descriptors already: try again at the next refusal

    def accept(self, listener: socket.socket) -> tuple[socket.socket, Any]:
        """The next connection on the blocking ``listener``, as ``accept``: (sock, address).

        Never raises for a peer's or a resource's trouble: it refuses clients
        or waits until it can serve one.  Raises OSError only when the
        listener itself is gone (closed: EBADF, ENOTSOCK; not listening:
        EINVAL), and KeyboardInterrupt from the wait, as ``accept`` does.
        """
        while True:
            try:
                sock, address = listener.accept()
            except (ConnectionAbortedError, InterruptedError):
                continue                # the client gave up while queued: the next one
            except OSError as exc:
                if exc.errno in _LISTENER_GONE or listener.fileno() == -1:
                    raise
                if not self.trouble:    # log the start of an episode, not every retry
                    self.trouble = True
                    log(f"{self.name}: accept failed ({exc.strerror}); refusing new"
                        " connections until descriptors free up")
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self.spare is not None:
                    accepted = self._accept_with_spare(listener)
                else:
                    time.sleep(ACCEPT_RETRY_DELAY)  # a bounded wait, not a spin
                    continue
                if accepted is None:
                    continue
                sock, address = accepted
            if self.trouble:
                self.trouble = False
                log(f"{self.name}: accepting connections again")
            return sock, address

    def _accept_with_spare(self, listener: socket.socket) -> tuple[socket.socket, Any] | None:
        """Close the spare and accept into its room: the client if the spare reopens, else None.

        None means the client was refused (closed at once), or accept failed
        again; the spare is open again either way, if the system allows.
        """
        assert self.spare is not None
        os.close(self.spare)
        self.spare = None
        try:
            sock, address = listener.accept()  # blocks, with room for one, until a client comes
        except OSError:
            self.spare = self._open_spare()
            return None                 # the next accept() says what it was
        self.spare = self._open_spare()
        if self.spare is not None:
            return sock, address        # room for both: a descriptor was freed meanwhile
        sock.close()                    # still full: the client sees its connection closed
        self.spare = self._open_spare()
        return None

    def close(self) -> None:
        """Close the spare descriptor (idempotent)."""
        if self.spare is not None:
            os.close(self.spare)
            self.spare = None
