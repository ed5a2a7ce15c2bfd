"""The exercises of the generators chapter (Part II): the two halves of the
trampoline that keeps a task's stack of generators, and the trap that
turns a sleep into a timer on the reactor.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

# The stack scheduler's own tests and its behaviour suite, on a virtual clock
# (a broken scheduler fails them at once instead of hanging).  "not
# yieldfrom" leaves out the yield-from scheduler, which does not use the code
# the student writes.  The server is checked through its loop properties.
_STACK_TESTS = ("tests/test_generators_scheduler.py", "tests/test_behaviour_generators.py",
                "-k", "generators and not yieldfrom")

# A scheduler is an event loop: it must keep all four, whatever it schedules.
_LOOP_PROPERTIES = ("single_thread", "idle_cpu", "no_fd_growth", "slow_client")

EXERCISES = [
    Exercise(
        name="trampoline-return",
        chapter="generators",
        title="Send a finished generator's return value to its caller",
        module="tinyloop.generators.scheduler",
        instructions="""
            In Scheduler._trampoline, the generator on top of the task's stack
            has just returned: send() raised StopIteration, and stop.value is
            what it returned.  Pop it off task's stack.  If the stack is now
            empty, the task is over: record its result with
            self._finish(task, stop.value, None) and return.  Otherwise go
            round the loop again so that stop.value is sent into the caller,
            the generator now on top (set value and exc for the next send).
        """,
        tests=_STACK_TESTS,
        stage="generators",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="trampoline-throw",
        chapter="generators",
        title="Throw an escaped exception into the caller",
        module="tinyloop.generators.scheduler",
        instructions="""
            In Scheduler._trampoline, an exception (error) has escaped the
            generator on top of the task's stack.  Pop that generator.  If the
            stack is now empty, the task has failed: record it with
            self._finish(task, None, error) and return.  Otherwise go round the
            loop again so that the exception is thrown into the caller, the
            generator now on top, at the yield where it waits: there an except
            clause may catch it.  Pass it through _drop_own_frame() first, so
            the traceback shows the generators and not the trampoline.
        """,
        tests=_STACK_TESTS,
        stage="generators",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="trap-sleep",
        chapter="generators",
        title="Turn a sleep trap into a timer",
        module="tinyloop.generators.scheduler",
        instructions="""
            Write Scheduler.trap_sleep(task, seconds).  Ask the reactor
            (self.loop) to resume the task after `seconds`: the callback is
            self._step with the arguments (task, None, None), so that the
            sleep returns None.  Then suspend the task with self._suspend(),
            naming the trap ("sleep", seconds) and giving it the way to
            withdraw the wait if the task is cancelled (the timer handle's
            cancel method); return what _suspend returns.
        """,
        tests=_STACK_TESTS,
    ),
]
