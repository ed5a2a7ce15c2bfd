# tinyloop/raw/epoll_et_server.py
#
# epoll(7) in edge-triggered mode (EPOLLET).
#
# Level-triggered epoll answers "is this socket ready?" on every call, for as
# long as it is.  Edge-triggered epoll answers "did this socket *become*
# ready?": a descriptor is reported when new data arrives or room appears in
# its send buffer, once, and then not again until the next such change.
#
# Rules that follow (epoll(7), "Level-triggered and edge-triggered"):
#   * Drain to EAGAIN.  After an edge we accept, recv and send until the
#     kernel says EAGAIN, because bytes we leave behind will not be reported
#     again.  Reading 64 KiB of a 200 KiB request and waiting would hang.
#   * Register once.  Every socket is registered for EPOLLIN | EPOLLOUT |
#     EPOLLET when accepted and never modified; wanting to write or not is our
#     own state, not the kernel's.  The level-triggered server pays an
#     epoll_ctl(2) call each time its interest changes; this one never does.
#   * Pausing is ours to undo.  When backpressure stops reading (output above
#     the high-water mark) before EAGAIN, no new edge will announce the bytes
#     still waiting.  They are read after the next send makes room: the send
#     buffer filled (that is how output piled up), so an EPOLLOUT edge will
#     come when the peer takes some, and the loop below reads again then.
#
# Discussion: draining one connection to EAGAIN lets it run while others
# wait.  Here the HTTP parser's limits bound a drain (a body is at most
# 16 MiB, and backpressure stops a pipelining client), so it is short.  A
# server that must be strictly fair caps the reads per wakeup and keeps the
# connections it cut off on a list to resume on the next turn, as nginx does.

from __future__ import annotations

import select
import socket

from tinyloop.raw.connection import Connection, accept_all

__all__ = ["serve"]

EDGE = select.EPOLLIN | select.EPOLLOUT | select.EPOLLET


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with edge-triggered epoll, until KeyboardInterrupt."""
    listener.setblocking(False)
    ep = select.epoll()
    connections: dict[int, Connection] = {}   # fd -> its connection
    try:
        ep.register(listener.fileno(), select.EPOLLIN | select.EPOLLET)
        while True:
            for fd, events in ep.poll():
                if fd == listener.fileno():
                    for sock in accept_all(listener):  # accepts until EAGAIN
                        conn = Connection(sock)
                        connections[conn.fd] = conn
                        ep.register(conn.fd, EDGE)
                    continue

                conn = connections[fd]
                # Whatever the edge said (in, out, error), make all the progress
                # we can on both sides; stop when neither moves.
                # exercise edge-triggered: begin
                while True:
                    wrote = conn.wants_write and conn.on_writable()
                    read = conn.wants_read and conn.on_readable()
                    if not (wrote or read):
                        break  # each side hit EAGAIN, EOF, an error, or is paused
                # exercise edge-triggered: end

                if conn.done:
                    ep.unregister(fd)  # before close(): EBADF after it
                    del connections[fd]
                    conn.close()
    finally:
        for conn in connections.values():
            conn.close()
        ep.close()
