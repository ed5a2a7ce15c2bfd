"""The exercises of the asyncio chapter (Part III): a transport's write path
with its high-water mark, the try-then-wait shape of the sock_*
coroutines, and the listener's back-off at the descriptor limit.  Each is
graded by the HTTP suite on both aio stages and by the suite that runs the
region's code: the conformance suite's aio row, or the limits tests.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

_AIO_TESTS = ("tests/test_servers.py", "tests/conformance", "-k", "aio")

EXERCISES = [
    Exercise(
        name="transport-write",
        chapter="asyncio",
        title="A transport's write path: send now, buffer the rest, pause the protocol",
        module="tinyloop.aio.selector_events",
        instructions="""
            Two regions in _SelectorSocketTransport.  In write(data), after
            the checks: if nothing is buffered, try self._sock.send(data) at
            once (BlockingIOError or InterruptedError mean 0 bytes sent; any
            other exception goes to self._fatal_error(exc, message) and
            write returns); if everything went, return.  Otherwise register
            self._write_ready with self._loop._add_writer(self._sock_fd, ...)
            and keep only the unsent rest.  Then append the rest to
            self._buffer (a bytes copy unless it is bytes already: the caller
            may reuse a bytearray), add its length to self._buffer_size, and
            call self._maybe_pause_protocol().  In _consume(sent), drop
            `sent` bytes from the front of the buffer: subtract them from
            self._buffer_size, pop every chunk sent whole, and replace a
            chunk sent in part by a memoryview of its unsent tail.
        """,
        tests=_AIO_TESTS,
        stage="aio",
        properties=("single_thread", "idle_cpu", "no_fd_growth", "slow_client"),
    ),
    Exercise(
        name="sock-retry",
        chapter="asyncio",
        title="sock_recv and friends: try the call, and retry it on readiness",
        module="tinyloop.aio.selector_events",
        instructions="""
            Two regions in BaseSelectorEventLoop.  In
            _sock_retry_when_ready(sock, writing, call, args): refuse a
            descriptor a transport owns (self._ensure_fd_no_transport(fd)),
            make a future, register self._sock_retry(future, call, args) with
            self._add_writer if `writing` else self._add_reader, and add a
            done-callback that removes the registration again:
            functools.partial(self._sock_done, fd, handle, remove), where
            `remove` is the matching _remove_writer or _remove_reader.
            Return the future.  In _sock_retry(future, call, args): do
            nothing if the future is done (it was cancelled); call
            call(*args); BlockingIOError or InterruptedError mean "not
            ready after all, wait again"; SystemExit and KeyboardInterrupt
            propagate; any other exception goes into the future; a result
            completes it.
        """,
        tests=_AIO_TESTS,
        stage="aio",
        properties=("single_thread", "idle_cpu", "no_fd_growth"),
    ),
    Exercise(
        name="aio-accept-backoff",
        chapter="asyncio",
        title="Out of descriptors: rest the listener instead of spinning",
        module="tinyloop.aio.selector_events",
        instructions="""
            Write BaseSelectorEventLoop._accept_back_off(exc, *serving),
            called when accept() failed with EMFILE, ENFILE, ENOBUFS or
            ENOMEM; serving[1] is the listening socket, and serving is what
            _start_serving takes.  The listener stays readable while its
            queue is full, so leaving it registered makes the loop spin.
            Report the start of an episode once, through
            self.call_exception_handler with a "message", the "exception"
            and the "socket" (not once per retry: an episode is under way
            while the socket's fileno() is a key of self._accept_backoff).
            Remove the listener's reader (self._remove_reader), and schedule
            self._start_serving(*serving) after ACCEPT_RETRY_DELAY seconds
            with self.call_later, keeping the timer handle in
            self._accept_backoff[sock.fileno()] (_stop_serving cancels it,
            and _accept_connection ends the episode when an accept works).
        """,
        # The limits test of the descriptor limit only: the idle-connections
        # test beside it does not run this region.
        tests=("tests/test_limits.py::test_at_the_descriptor_limit_no_spin_no_death_and_recovery",
               "tests/test_servers.py", "-k", "aio"),
        stage="aio",
        properties=("single_thread", "idle_cpu", "no_fd_growth"),
    ),
]
