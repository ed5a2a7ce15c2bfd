"""The exercises of the readiness chapter (Part I): what a non-blocking
connection does when its socket is ready, the loops on select(2),
poll(2) and epoll(7) that find out which sockets are, and what a loop does
with a listener it cannot accept from.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

# An event loop must keep all four, whatever its system call.
_LOOP_PROPERTIES = ("single_thread", "idle_cpu", "no_fd_growth", "slow_client")

EXERCISES = [
    Exercise(
        name="partial-writes",
        chapter="readiness",
        title="Send what the kernel takes, keep the rest",
        module="tinyloop.raw.connection",
        instructions="""
            Write Connection.on_writable().  self.outgoing holds the response
            bytes not sent yet.  Send them with one non-blocking send(): the
            kernel may take all, some or (EAGAIN, BlockingIOError) none of
            them.  Remove what it took from the front of self.outgoing and
            keep the rest for the next time the socket is writable.  Return
            True if it took any bytes.  If send() fails otherwise (EPIPE,
            ECONNRESET: any other OSError), set self.failed and return False.
            Do not use sendall(): on a non-blocking socket it cannot wait.
        """,
        tests=("tests/test_servers.py", "-k", "epoll"),
        stage="epoll",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="backpressure",
        chapter="readiness",
        title="Stop reading from a client that does not read",
        module="tinyloop.raw.connection",
        instructions="""
            Write the property Connection.wants_read: whether the server
            should wait for this socket to be readable.  Not once the
            connection has failed, nor once HTTP has decided to close
            (self.http.should_close).  And not while HIGH_WATER bytes or more
            wait in self.outgoing: a client that pipelines requests but never
            reads the answers must be left to fill its own socket buffers,
            not ours.
        """,
        tests=("tests/test_servers.py", "-k", "poll and not epoll"),
        stage="poll",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="fd-setsize",
        chapter="readiness",
        title="Refuse what select() cannot watch",
        module="tinyloop.raw.select_server",
        instructions="""
            In _accept(), each new socket's descriptor must be below
            FD_SETSIZE for select() to watch it.  Wrap each accepted socket
            in a Connection and add it to `connections`, except one whose
            descriptor is FD_SETSIZE or more: log a line that says why
            (tinyloop.serving.log, mentioning FD_SETSIZE) and close it, and go
            on serving the others.
        """,
        tests=("tests/test_select_fd_setsize.py", "tests/test_servers.py", "-k", "select"),
        stage="select",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="accept-backoff",
        chapter="readiness",
        title="Out of descriptors: rest the listener instead of spinning",
        module="tinyloop.raw.select_server",
        instructions="""
            In serve(), before the select() call, decide whether to watch the
            listener.  When the process is out of descriptors, accept() fails
            with EMFILE and the connection stays queued, so a listener in the
            read set is reported readable on every call: the loop spins.
            acceptor.rest_left() is the number of seconds the listener must
            still rest after such a failure, or None when it may accept.  Set
            `timeout` to it, and add the listener to `readers` only when it
            is None: select() is then called with `timeout`, so the loop
            wakes when the rest is over.  The server must use almost no CPU
            while it is full, and accept new clients again once others leave.
        """,
        tests=("tests/test_limits.py", "tests/test_servers.py", "-k", "select"),
        stage="select",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="kqueue-changes",
        chapter="readiness",
        title="Keep kqueue's filters in step with what a connection wants",
        module="tinyloop.raw.kqueue_server",
        instructions="""
            Write interest_changes(conn, enabled).  enabled[conn.fd] is the
            pair (READ filter on, WRITE filter on) the kernel has; compare it
            with (conn.wants_read, conn.wants_write) and return one kevent per
            filter that must change, with EV_ENABLE or EV_DISABLE, and nothing
            for a filter that is already right.  Record the new pair in
            enabled[conn.fd]: the serve() loop batches your changes into its
            next control() call.
        """,
        tests=("tests/test_kqueue_server.py", "tests/test_servers.py", "-k", "kqueue"),
        stage="kqueue",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="edge-triggered",
        chapter="readiness",
        title="Handle an edge: drain both directions to EAGAIN, within a budget",
        module="tinyloop.raw.epoll_et_server",
        instructions="""
            An edge-triggered epoll reports a socket once per change, so after
            an event you must make all the progress you can: send while the
            connection wants to write and the kernel takes bytes, read while
            it wants to read and bytes arrive, and go round again until
            neither moves (each side hit EAGAIN, end of stream, an error, or
            is paused by backpressure).  Connection.on_writable() and
            on_readable() return True when they made progress.  Go round at
            most `budget` times and return True if the budget ran out while
            the connection could still move (the server comes back to it
            without waiting for an edge), False otherwise.
        """,
        tests=("tests/test_servers.py", "-k", "epoll-et"),
        stage="epoll-et",
        properties=_LOOP_PROPERTIES,
    ),
]
