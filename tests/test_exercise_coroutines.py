# tests/test_exercise_coroutines.py
#
# The coroutines chapter's exercises (task-step, task-cancel,
# readiness-future, flow-control), each behaviour said in the exercise's
# words.  The checker runs these first (tests named test_<exercise>_...).
# Every test drives a real Loop on a virtual clock and scripted selector
# (tests/fakes.py): nothing sleeps, and every run interleaves the same.

from __future__ import annotations

import types
from typing import Any

import pytest
from fakes import FakeSelector, VirtualClock, run_until_idle

from tinyloop.callbacks.loop import Loop
from tinyloop.coroutines.futures import CancelledError, Future
from tinyloop.coroutines.tasks import Task, sleep


def make_loop() -> Loop:
    clock = VirtualClock()
    loop = Loop(selector=FakeSelector(clock), clock=clock)
    loop.set_exception_handler(lambda lp, context: None)
    return loop


@pytest.fixture
def loop():
    loop = make_loop()
    yield loop
    loop.close()


def drive(loop: Loop) -> None:
    run_until_idle(loop, loop._selector)  # type: ignore[arg-type]


def outcome(task: Task) -> str:
    if not task.done():
        return "still pending"
    if task.cancelled():
        return "cancelled"
    if task.exception() is not None:
        return f"failed with {type(task.exception()).__name__}: {task.exception()}"
    return f"returned {task.result()!r}"


# --- task-step --------------------------------------------------------------------

def test_task_step_a_result_is_the_tasks_result(loop: Loop) -> None:
    async def answer() -> int:
        return 42

    task = Task(answer(), loop=loop)
    drive(loop)
    assert task.done() and not task.cancelled() and task.result() == 42, (
        f"a coroutine that returns 42 must make its task's result 42; the task {outcome(task)}")


def test_task_step_awaiting_a_future_waits_for_it_and_resumes_with_its_result(loop: Loop) -> None:
    future = Future(loop=loop)

    async def waiter() -> Any:
        return await future

    task = Task(waiter(), loop=loop)
    drive(loop)
    assert not task.done(), f"a task awaiting a pending future must wait; it {outcome(task)}"
    assert task._waiting_on is future, (
        "a task waiting on a future of its loop must remember it in self._waiting_on "
        f"(cancel() needs it); it holds {task._waiting_on!r}")
    future.set_result("ready")
    drive(loop)
    assert task.done() and task.result() == "ready", (
        "when the awaited future completes, its done-callback (self._wakeup) must step the task, "
        f"and the await returns the result; the task {outcome(task)}")


def test_task_step_an_exception_is_thrown_in_at_the_await(loop: Loop) -> None:
    future = Future(loop=loop)

    async def catcher() -> str:
        try:
            await future
        except KeyError:
            return "caught"
        return "not caught"

    task = Task(catcher(), loop=loop)
    drive(loop)
    future.set_exception(KeyError("x"))
    drive(loop)
    assert task.done() and task.result() == "caught", (
        "an exception of the awaited future must be raised at the await, where the coroutine can "
        f"catch it (throw(exc) into the coroutine); the task {outcome(task)}")


def test_task_step_a_future_of_another_loop_fails_with_runtime_error(loop: Loop) -> None:
    other = make_loop()
    try:
        foreign = Future(loop=other)

        async def confused() -> str:
            try:
                await foreign
            except RuntimeError:
                return "RuntimeError"
            return "no error"

        task = Task(confused(), loop=loop)
        drive(loop)
        assert task.done() and task.result() == "RuntimeError", (
            "a task awaiting a future of another loop must get a RuntimeError thrown in at the "
            f"await (scheduled with call_soon); the task {outcome(task)} after the loop went idle")
        assert not foreign._callbacks, (
            "a future of another loop must not get this task's wakeup as its done-callback")
    finally:
        other.close()


def test_task_step_awaiting_itself_fails_with_runtime_error(loop: Loop) -> None:
    holder: list[Task] = []

    async def narcissus() -> str:
        await sleep(0)
        try:
            await holder[0]
        except RuntimeError as error:
            return str(error)
        return "no error"

    holder.append(Task(narcissus(), loop=loop))
    drive(loop)
    task = holder[0]
    assert task.done() and not task.cancelled() and "itself" in str(task.result()), (
        "a task awaiting itself must get RuntimeError(\"a task cannot await itself\") thrown in; "
        f"the task {outcome(task)}")


def test_task_step_a_bare_yield_steps_again_after_the_others(loop: Loop) -> None:
    order: list[str] = []

    async def polite(name: str) -> None:
        order.append(name + "1")
        await sleep(0)  # a bare yield
        order.append(name + "2")

    a, b = Task(polite("a"), loop=loop), Task(polite("b"), loop=loop)
    drive(loop)
    assert order == ["a1", "b1", "a2", "b2"], (
        "a bare yield (None) must schedule a plain step with call_soon, behind the tasks ready "
        f"now; the steps ran in the order {order}")
    assert a.done() and b.done(), f"both tasks must finish; a {outcome(a)}, b {outcome(b)}"


def test_task_step_anything_else_yielded_fails_naming_it(loop: Loop) -> None:
    @types.coroutine
    def yield_a_number():
        yield 42

    async def confused() -> str:
        try:
            await yield_a_number()
        except RuntimeError as error:
            return str(error)
        return "no error"

    task = Task(confused(), loop=loop)
    drive(loop)
    assert task.done() and not task.cancelled(), f"the task must finish; it {outcome(task)}"
    assert "yielded 42" in task.result(), (
        "yielding something that is not a Future (here 42) must throw in a RuntimeError whose "
        f"message names what was yielded (\"... yielded 42; ...\"); the message was {task.result()!r}")


def test_task_step_a_cancel_during_the_step_cancels_the_future_it_awaits(loop: Loop) -> None:
    future = Future(loop=loop)
    holder: list[Task] = []

    async def cancels_itself() -> str:
        holder[0].cancel()  # during this very step: the task is running
        try:
            await future
        except CancelledError:
            return "cancelled at the await"
        return "not cancelled"

    holder.append(Task(cancels_itself(), loop=loop))
    drive(loop)
    task = holder[0]
    assert future.cancelled(), (
        "a cancel() that came during the step (self._must_cancel) must cancel the future the "
        f"task then waits on, at once; the future is {'done' if future.done() else 'still pending'}")
    assert task.done(), (
        "so the task must be stepped with CancelledError without waiting for the future; "
        f"the task {outcome(task)}")
    assert not task._must_cancel, "once handed to the future, the cancel request must be cleared"


# --- task-cancel ---------------------------------------------------------------------

def test_task_cancel_a_done_task_cannot_be_cancelled(loop: Loop) -> None:
    async def quick() -> int:
        return 1

    task = Task(quick(), loop=loop)
    drive(loop)
    result = task.cancel()
    assert result is False, f"cancel() of a done task must return False; yours returned {result!r}"
    assert task.result() == 1, "cancel() of a done task must not change its result"


def test_task_cancel_a_waiting_task_is_cancelled_through_its_future(loop: Loop) -> None:
    future = Future(loop=loop)

    async def waits() -> str:
        try:
            await future
        except CancelledError as error:
            return f"CancelledError({error.args[0] if error.args else ''})"
        return "not cancelled"

    task = Task(waits(), loop=loop)
    drive(loop)
    result = task.cancel("stop")
    assert result is True, f"cancel() of a waiting task must return True; yours returned {result!r}"
    assert future.cancelled(), "cancel() of a waiting task must cancel the future it waits on"
    drive(loop)
    assert task.done() and task.result() == "CancelledError(stop)", (
        "the await must then raise CancelledError with the message given to cancel(); "
        f"the task {outcome(task)}")


def test_task_cancel_before_the_first_step(loop: Loop) -> None:
    ran: list[str] = []

    async def never() -> None:
        ran.append("body")

    task = Task(never(), loop=loop)
    result = task.cancel("early")
    assert result is True, f"cancel() of a task not started must return True; yours returned {result!r}"
    assert task._must_cancel, "a task not started has no future: cancel() must set self._must_cancel"
    assert task._cancel_message == "early", (
        f"and keep the message in self._cancel_message; it holds {task._cancel_message!r}")
    drive(loop)
    assert task.cancelled(), f"its first step must then throw CancelledError in; the task {outcome(task)}"


def test_task_cancel_a_future_that_refuses_is_cancelled_at_the_next_step(loop: Loop) -> None:
    future = Future(loop=loop)

    async def waits() -> str:
        await future
        try:
            await sleep(0)
        except CancelledError:
            return "cancelled at the next step"
        return "not cancelled"

    task = Task(waits(), loop=loop)
    drive(loop)
    future.set_result(None)  # done: its cancel() will refuse, the wakeup is queued
    result = task.cancel()
    assert result is True, f"cancel() must return True when the task is not done; yours returned {result!r}"
    assert task._must_cancel, (
        "when the awaited future is already done (it refuses to be cancelled), cancel() must set "
        "self._must_cancel so that the next step throws CancelledError in")
    drive(loop)
    assert task.cancelled() or task.result() == "cancelled at the next step", (
        f"the next step must throw CancelledError in; the task {outcome(task)}")


def test_task_cancel_forgets_an_unretrieved_exception(loop: Loop) -> None:
    future = Future(loop=loop)

    async def waits() -> None:
        await future

    task = Task(waits(), loop=loop)
    drive(loop)
    task._log_traceback = True
    task.cancel()
    assert task._log_traceback is False, (
        "cancel() must forget any unretrieved exception (self._log_traceback = False)")
