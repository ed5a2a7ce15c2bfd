# tinyloop/raw/epoll_server.py
#
# The poll server again, on epoll(7), level-triggered:
#
#     ep = select.epoll()              # epoll_create1(2): an interest list in the kernel
#     ep.register(fd, EPOLLIN)         # epoll_ctl(2) EPOLL_CTL_ADD
#     ep.modify(fd, EPOLLIN | EPOLLOUT)    # EPOLL_CTL_MOD
#     ep.unregister(fd)                # EPOLL_CTL_DEL
#     for fd, events in ep.poll(timeout): ...   # epoll_wait(2)
#
# The difference from poll(2) is where the interest list lives.  poll is
# given the whole list on every call and scans it; epoll keeps it in the
# kernel, changed one descriptor at a time by epoll_ctl, and each socket,
# when it becomes ready, puts itself on the epoll instance's ready list.
# epoll_wait then only copies out that ready list: O(ready), not
# O(connections).  With 10,000 mostly idle keep-alive clients, that is the
# whole difference.
#
# Level-triggered (the default) means epoll_wait reports a descriptor for as
# long as it is ready, exactly like select and poll, so this loop is the poll
# loop with the names changed.  epoll_et_server.py shows edge-triggered mode.

from __future__ import annotations

import select
import socket

from tinyloop.raw.connection import Connection, accept_all

__all__ = ["serve"]

IN, OUT, ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR | select.EPOLLHUP


def _interest(conn: Connection) -> int:
    """The events to wait for on ``conn``: read and write interest as it wants them."""
    return (IN if conn.wants_read else 0) | (OUT if conn.wants_write else 0)


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with level-triggered epoll, until KeyboardInterrupt."""
    listener.setblocking(False)
    ep = select.epoll()
    connections: dict[int, Connection] = {}   # fd -> its connection
    interest: dict[int, int] = {}             # fd -> the events registered for it
    try:
        ep.register(listener.fileno(), IN)
        while True:
            for fd, events in ep.poll():
                if fd == listener.fileno():
                    for sock in accept_all(listener):
                        conn = Connection(sock)
                        connections[conn.fd] = conn
                        interest[conn.fd] = IN
                        ep.register(conn.fd, IN)
                    continue

                conn = connections[fd]
                if events & (OUT | ERR) and conn.wants_write:
                    conn.on_writable()
                if events & (IN | ERR) and conn.wants_read:
                    conn.on_readable()

                if conn.done:
                    ep.unregister(fd)  # before close(): EBADF after it
                    del connections[fd], interest[fd]
                    conn.close()
                elif (wanted := _interest(conn)) != interest[fd]:
                    ep.modify(fd, wanted)  # one epoll_ctl(2) per change of mind
                    interest[fd] = wanted
    finally:
        for conn in connections.values():
            conn.close()
        ep.close()
