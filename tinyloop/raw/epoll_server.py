"""The poll server again, on epoll(7), level-triggered:

    ep = select.epoll()              # epoll_create1(2): an interest list in the kernel
    ep.register(fd, EPOLLIN)         # epoll_ctl(2) EPOLL_CTL_ADD
    ep.modify(fd, EPOLLIN | EPOLLOUT)    # EPOLL_CTL_MOD
    ep.unregister(fd)                # EPOLL_CTL_DEL
    for fd, events in ep.poll(timeout): ...   # epoll_wait(2)

The difference from poll(2) is where the interest list lives.  poll is
given the whole list on every call and scans it; epoll keeps it in the
kernel, changed one descriptor at a time by epoll_ctl, and each socket,
when it becomes ready, puts itself on the epoll instance's ready list.
epoll_wait then only copies out that ready list: O(ready), not
O(connections).  With 10,000 mostly idle keep-alive clients, that is the
whole difference.

Level-triggered (the default) means epoll_wait reports a descriptor for as
long as it is ready, exactly like select and poll.  Python's epoll object
has poll's methods, and epoll's event bits have poll's values, so this
server runs the poll server's loop unchanged: every line that differs
between the two servers is in the kernel.  epoll_et_server.py shows
edge-triggered mode, where the loop must change.
"""

from __future__ import annotations

import select
import socket

from tinyloop.raw.poll_server import serve_with

__all__ = ["serve"]

# epoll_ctl(2) names its event bits after poll(2)'s, and <sys/epoll.h> gives
# them poll's values (EPOLLIN == POLLIN == 0x001, and so on).  The manual does
# not promise it, so we check it: it is what lets serve_with run here.
assert (select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR, select.EPOLLHUP) == \
       (select.POLLIN, select.POLLOUT, select.POLLERR, select.POLLHUP)


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) with level-triggered epoll.

    Runs until KeyboardInterrupt.
    """
    ep = select.epoll()  # epoll_create1(2): one more descriptor, ours to close
    try:
        serve_with(ep, listener, "epoll")
    finally:
        ep.close()
