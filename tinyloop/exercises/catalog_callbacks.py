"""The exercises of the callbacks chapter (Part II): the timer heap with lazy
cancellation, the loop's one iteration in four steps, and the server's
bookkeeping of read and write interest.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

# The reactor's unit tests, the shared behaviour suite on the reactor, and the
# HTTP suite on the callbacks server (which runs on the student's reactor too).
_LOOP_TESTS = ("tests/test_callbacks_loop.py", "tests/test_behaviour_callbacks.py",
               "tests/test_callbacks_server.py", "tests/test_servers.py", "-k", "callbacks")

_LOOP_PROPERTIES = ("single_thread", "idle_cpu", "no_fd_growth", "slow_client")

EXERCISES = [
    Exercise(
        name="timer-heap",
        chapter="callbacks",
        title="Push timers on a heap; pop the due ones, dropping the cancelled",
        module="tinyloop.callbacks.loop",
        instructions="""
            Two regions.  In Loop.call_at, make a TimerHandle(when, sequence,
            callback, args, self), with the next number of self._sequence as
            its sequence (it breaks ties between equal deadlines), push it on
            the heap self._scheduled with heapq, mark it _in_heap, and return
            it.  In Loop._move_due_timers, pop every timer whose `when` is at
            or before now (self.time() + CLOCK_RESOLUTION) off the heap: mark
            it no longer _in_heap; if it was cancelled, just drop it (and
            count one less in self._cancelled_timers); otherwise append it to
            the ready queue self._ready.
        """,
        tests=_LOOP_TESTS,
        stage="callbacks",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="run-once",
        chapter="callbacks",
        title="One iteration of the loop, in four steps",
        module="tinyloop.callbacks.loop",
        instructions="""
            Write the bodies of Loop.run_once and Loop._run_ready.  In
            run_once: (1) compute the timeout with self._compute_timeout().
            (2) Wait on self._selector.select() with it.  (3) Queue the
            callbacks of the ready file descriptors with
            self._process_events(), then the due timers with
            self._move_due_timers().  (4) Call self._run_ready().  In
            _run_ready, run the handles that are in the ready queue now, and
            only those: count them first, popleft() that many, and run each
            one that is not cancelled with self._run_handle().  Callbacks they
            schedule must wait for the next iteration.
        """,
        tests=_LOOP_TESTS,
        stage="callbacks",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="callback-interest",
        chapter="callbacks",
        title="Keep the reactor's interest in step with the connection",
        module="tinyloop.callbacks.server",
        instructions="""
            Write Client._update, called after every callback of a connection.
            If self.conn.done, close the client and return.  Otherwise, when
            conn.wants_read differs from self.reading, add the reader
            (self._on_readable) for conn.fd or remove it, and remember the new
            state; do the same for writing (conn.wants_write, self.writing,
            self._on_writable).  Changing only what changed saves a system call
            per callback; asking for writability only while output waits keeps
            the loop from spinning.
        """,
        # -x: a starter that never answers would make every HTTP test wait
        # for its socket timeout; the unit tests catch it at once.
        tests=("tests/test_callbacks_server.py", "tests/test_servers.py", "-x", "-k", "callbacks"),
        stage="callbacks",
        properties=_LOOP_PROPERTIES,
    ),
]
