"""The exercises of the coroutines chapter (Part II): a Task's step, its
cancellation, readiness as a future, and a writer's flow control.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

_TASK_TESTS = ("tests/test_coroutines_tasks.py", "tests/test_behaviour_coroutines.py",
               "tests/test_servers.py", "-k", "coroutines")
_STREAM_TESTS = ("tests/test_coroutines_streams.py", "tests/test_behaviour_coroutines.py",
                 "tests/test_servers.py", "-k", "coroutines")

_LOOP_PROPERTIES = ("single_thread", "idle_cpu", "no_fd_growth", "slow_client")

EXERCISES = [
    Exercise(
        name="task-step",
        chapter="coroutines",
        title="Step a coroutine, and wait on the future it yields",
        module="tinyloop.coroutines.tasks",
        instructions="""
            Two regions.  In Task._step, resume the coroutine: send(None) into
            self._coro if exc is None, else throw(exc) into it, and keep what
            it yields in `yielded` (the surrounding code handles
            StopIteration and exceptions).  In Task._wait_on, decide what
            happens next.  A Future of this loop: remember it in
            self._waiting_on, add self._wakeup as its done-callback, and if a
            cancel came during the step (self._must_cancel), cancel that
            future now and, if it agreed, clear self._must_cancel (the
            future's cancellation carries it).  A future of another loop: schedule (call_soon) a
            step that throws a RuntimeError in; the task itself: the same,
            with RuntimeError("a task cannot await itself").  None (a bare
            yield): schedule a plain step with call_soon.  Anything else:
            schedule a step that throws a RuntimeError naming what was
            yielded: f"task {self._name!r} yielded {yielded!r}; a coroutine
            may only await Futures".
        """,
        tests=_TASK_TESTS,
        stage="coroutines",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="task-cancel",
        chapter="coroutines",
        title="Cancel a task where it waits",
        module="tinyloop.coroutines.tasks",
        instructions="""
            Write Task.cancel(msg).  A done task cannot be cancelled: return
            False.  Otherwise (and forget any unretrieved exception,
            _log_traceback = False): if the task waits on a future and that
            future agrees to be cancelled, return True; its done-callback will
            step the task and the await will raise CancelledError.  If not
            (the task has not started, is running, or its future is already
            done), set self._must_cancel and self._cancel_message, so the next
            step throws CancelledError in, and return True.
        """,
        tests=_TASK_TESTS,
        stage="coroutines",
    ),
    Exercise(
        name="readiness-future",
        chapter="coroutines",
        title="Turn a socket's readiness into a future to await",
        module="tinyloop.coroutines.streams",
        instructions="""
            Write the body of _wait(fileobj, waiter, add, remove).  `add` is
            loop.add_reader or loop.add_writer: register _wake with the
            argument waiter for fileobj, so readiness completes the future.
            Then await the waiter, and whatever happens (readiness, an error,
            cancellation) remove the registration with remove(fileobj)
            afterwards.
        """,
        tests=_STREAM_TESTS,
        stage="coroutines",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="flow-control",
        chapter="coroutines",
        title="High- and low-water marks: a slow reader stops a fast writer",
        module="tinyloop.coroutines.streams",
        instructions="""
            Three regions in StreamWriter.  In write(), once the output is
            buffered: if not already paused and the buffer holds more than
            self._high_water bytes, pause (self._paused = True).  In
            _on_writable(), after sending: if paused and the buffer is down to
            self._low_water bytes or fewer, unpause and wake the drainer
            (self._wake_drain()).  In drain(): while paused, wait on a new
            Future kept in self._drain_waiter (reset it to None afterwards,
            whatever happens).
        """,
        tests=_STREAM_TESTS,
        stage="coroutines",
        properties=("single_thread", "no_fd_growth", "slow_client"),
    ),
]
