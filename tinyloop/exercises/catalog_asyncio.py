# tinyloop/exercises/catalog_asyncio.py
#
# The exercises of the asyncio chapter (Part III): a transport's write path
# with its high-water mark, and the try-then-wait shape of the sock_*
# coroutines.  Each is graded by the HTTP suite on both aio stages and by the
# conformance suite's aio row, which run the regions' code.

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
]
