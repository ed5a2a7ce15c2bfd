# tests/test_exercise_generators.py
#
# The generators chapter's exercises (trampoline-return, trampoline-throw,
# trap-sleep), each behaviour said in the exercise's words; the checker runs
# these first (tests named test_<exercise>_...).  The stack scheduler on a
# Loop with a virtual clock and a scripted selector (tests/fakes.py).

from __future__ import annotations

import traceback

import pytest
from fakes import FakeSelector, VirtualClock

from tinyloop.callbacks.loop import Loop
from tinyloop.generators.scheduler import Scheduler, Task
from tinyloop.generators.traps import Cancelled, cancel, sleep, spawn


class Run:
    """A Scheduler on a virtual clock; ``failures`` collects what it reports."""

    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.loop = Loop(selector=FakeSelector(self.clock), clock=self.clock)
        self.failures: list[tuple[Task, BaseException]] = []
        self.scheduler = Scheduler(self.loop, on_error=lambda task, error: self.failures.append((task, error)))

    def run(self, coro):
        watchdog = self.loop.call_later(10_000, self.loop.stop)
        try:
            return self.scheduler.run(coro)
        finally:
            watchdog.cancel()


@pytest.fixture
def run():
    harness = Run()
    yield harness
    harness.scheduler.close()
    harness.loop.close()


# --- trampoline-return ------------------------------------------------------------

def test_trampoline_return_a_callee_returns_its_value_to_the_caller(run: Run) -> None:
    def callee():
        yield from ()
        return 42

    def caller():
        value = yield callee()
        return ("got", value)

    result = run.run(caller())
    assert result == ("got", 42), (
        "when a called generator returns, its value (stop.value) must be sent into its caller, "
        f"the generator now on top of the stack; the main task returned {result!r}")


def test_trampoline_return_the_last_return_finishes_the_task(run: Run) -> None:
    def main():
        yield from ()
        return "done"

    result = run.run(main())
    assert result == "done", (
        "when the last generator of a task returns, the stack is empty: the task must finish with "
        f"that value (self._finish(task, stop.value, None)); run() returned {result!r}")


def test_trampoline_return_a_deep_stack_unwinds_level_by_level(run: Run) -> None:
    def level(n: int):
        if n == 0:
            return 0
        below = yield level(n - 1)
        return below + 1

    result = run.run(level(30))
    assert result == 30, (
        "each return must pop exactly one generator and give its value to the one below; "
        f"thirty nested calls returned {result!r}, not 30")


def test_trampoline_return_the_caller_resumes_after_its_callee(run: Run) -> None:
    order: list[str] = []

    def callee():
        order.append("callee")
        yield sleep(0)
        return None

    def caller():
        order.append("caller before")
        yield callee()
        order.append("caller after")
        yield sleep(1)
        order.append("caller slept")
        return None

    run.run(caller())
    assert order == ["caller before", "callee", "caller after", "caller slept"], (
        f"the caller must resume where it called, after its callee returned; the order was {order}")


# --- trampoline-throw ---------------------------------------------------------------

def test_trampoline_throw_an_exception_reaches_the_callers_except(run: Run) -> None:
    def callee():
        yield from ()
        raise KeyError("lost")

    def caller():
        try:
            yield callee()
        except KeyError as error:
            return f"caught {error.args[0]}"
        return "not caught"

    result = run.run(caller())
    assert result == "caught lost", (
        "an exception that escapes a generator must be thrown into its caller at the yield where "
        f"it waits, where an except clause can catch it; the main task returned {result!r}")


def test_trampoline_throw_an_uncaught_exception_fails_the_task(run: Run) -> None:
    def callee():
        yield from ()
        raise ValueError("bad")

    def caller():
        yield callee()
        return "survived"

    with pytest.raises(ValueError, match="bad") as info:
        run.run(caller())
    assert info.value.args == ("bad",), "the task must fail with the exception that escaped"


def test_trampoline_throw_an_uncaught_exception_in_a_spawned_task_is_reported(run: Run) -> None:
    def failing():
        yield sleep(0)
        raise RuntimeError("oops")

    def main():
        yield spawn(failing())
        yield sleep(1)
        return None

    run.run(main())
    errors = [type(e).__name__ for _, e in run.failures]
    assert errors == ["RuntimeError"], (
        "when the stack is empty the task has failed: record it with self._finish(task, None, "
        f"error), which reports an exception nobody joins; the scheduler reported {errors}")


def test_trampoline_throw_the_traceback_shows_the_generators_not_the_trampoline(run: Run) -> None:
    def callee():
        yield from ()
        raise LookupError("where")

    def caller():
        try:
            yield callee()
        except LookupError as error:
            return traceback.extract_tb(error.__traceback__)
        return None

    frames = run.run(caller())
    names = [frame.name for frame in frames]
    assert "_trampoline" not in names, (
        "the exception must pass through _drop_own_frame() before it is thrown into the caller, "
        f"so its traceback shows the generators, not the trampoline; its frames are {names}")


def test_trampoline_throw_a_cancelled_callee_unwinds_through_its_callers(run: Run) -> None:
    seen: list[str] = []

    def callee():
        try:
            yield sleep(100)
        finally:
            seen.append("callee cleaned up")

    def caller():
        try:
            yield callee()
        except Cancelled:
            seen.append("caller saw Cancelled")
            raise

    def main():
        task = yield spawn(caller())
        yield sleep(1)
        yield cancel(task)
        yield sleep(1)
        return None

    run.run(main())
    assert seen == ["callee cleaned up", "caller saw Cancelled"], (
        "an exception thrown into the innermost generator (here Cancelled) must go up the stack, "
        f"caller by caller; what happened: {seen}")


# --- trap-sleep -------------------------------------------------------------------------

def test_trap_sleep_resumes_after_the_given_seconds_with_none(run: Run) -> None:
    def main():
        start = run.clock()
        value = yield sleep(2.5)
        return value, run.clock() - start

    value, slept = run.run(main())
    assert slept == pytest.approx(2.5), (
        f"sleep(2.5) must resume the task after 2.5 s (loop.call_later); it resumed after {slept} s")
    assert value is None, f"the sleep must return None (step with (task, None, None)); it returned {value!r}"


def test_trap_sleep_a_sleeping_task_is_suspended_in_its_trap(run: Run) -> None:
    def sleeper():
        yield sleep(5)

    def main():
        task = yield spawn(sleeper())
        yield sleep(1)
        return task.trap

    trap = run.run(main())
    assert trap == ("sleep", 5), (
        "a sleeping task must be suspended with self._suspend(), naming the trap ('sleep', seconds); "
        f"task.trap is {trap!r}")


def test_trap_sleep_cancelling_a_sleeper_withdraws_its_timer(run: Run) -> None:
    def sleeper():
        yield sleep(50)

    def main():
        task = yield spawn(sleeper())
        yield sleep(1)
        yield cancel(task)
        yield sleep(1)
        return task

    task = run.run(main())
    assert task.cancelled, f"a cancelled sleeper must end cancelled; it ended {task!r}"
    live = [t for t in run.loop._scheduled if not t._cancelled]
    assert not live, (
        "cancelling a sleeping task must cancel its timer (give _suspend the timer handle's cancel "
        f"method); {len(live)} timer(s) still live on the loop")
