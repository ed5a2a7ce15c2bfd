# tinyloop/baseline/blocking.py
#
# The simplest server that works: accept one client, serve it until it
# leaves, then accept the next.  Every call blocks, so the code reads like
# the protocol: read, answer, read again.
#
# Its lesson is what it cannot do.  While one client is connected, nobody
# else is served: a second client's connection waits in the kernel's accept
# queue, finished by the kernel's handshake but never read.  One slow client
# (or one that keeps its connection alive and idle) holds up everyone.  The
# idle timeout below only bounds *how long*: a client that sends nothing for
# IDLE_TIMEOUT seconds is dropped, so the server cannot hang forever, but it
# still serves one client at a time.  The threaded server is the classic fix;
# the readiness servers of Part I are the other.

from __future__ import annotations

import socket

from tinyloop.http import HTTPConnection

__all__ = ["IDLE_TIMEOUT", "READ_SIZE", "serve", "serve_client"]

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


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening, blocking), one client at a time.

    Runs until KeyboardInterrupt (Ctrl-C, or SIGTERM through the CLI), which
    unwinds out of ``accept()`` or out of the client being served.
    """
    while True:
        sock, _ = listener.accept()
        with sock:  # closed whatever happens, KeyboardInterrupt included
            serve_client(sock)


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
