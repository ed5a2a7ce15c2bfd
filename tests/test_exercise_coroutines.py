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
    loop.run_once()  # the first step only: the future's callbacks have not run yet
    task = holder[0]
    assert future.cancelled() and not task._must_cancel, (
        "a cancel() during the step must be handed to the future the task then awaits: cancel "
        "that future and clear self._must_cancel (the future's cancellation carries it)")
    drive(loop)
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
    assert not task._must_cancel, (
        "when the future agreed to be cancelled, that is all: return True, without setting "
        "self._must_cancel (only a task with no future to cancel needs it)")
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


# --- readiness-future ------------------------------------------------------------------

class Registry:
    """Stands for loop.add_reader/remove_reader: records the calls, and the callback."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.callback = None

    def add(self, fileobj: object, callback: Any, *args: Any) -> None:
        self.calls.append(("add", fileobj, args))
        self.callback = (callback, args)

    def remove(self, fileobj: object) -> bool:
        self.calls.append(("remove", fileobj))
        return True


def wait_task(loop: Loop, registry: Registry, waiter: Future) -> Task:
    from tinyloop.coroutines import streams
    return Task(streams._wait("sock", waiter, registry.add, registry.remove), loop=loop)


def test_readiness_future_registers_wake_with_the_waiter(loop: Loop) -> None:
    registry, waiter = Registry(), Future(loop=loop)
    task = wait_task(loop, registry, waiter)
    drive(loop)
    assert registry.calls[:1] == [("add", "sock", (waiter,))], (
        "_wait must first register _wake for the socket with the waiter as its argument "
        f"(add(fileobj, _wake, waiter)); the calls were {registry.calls}")
    assert not task.done(), f"then await the waiter: the task must wait; it {outcome(task)}"
    callback, args = registry.callback
    callback(*args)  # the loop reports readiness
    drive(loop)
    assert waiter.done() and task.done() and task.exception() is None, (
        f"readiness (the callback) must complete the waiter and so end the wait; the task {outcome(task)}")
    assert registry.calls[-1] == ("remove", "sock"), (
        f"after the wait the registration must be removed (remove(fileobj)); the calls were {registry.calls}")


def test_readiness_future_removes_the_registration_on_cancellation(loop: Loop) -> None:
    registry, waiter = Registry(), Future(loop=loop)
    task = wait_task(loop, registry, waiter)
    drive(loop)
    task.cancel()
    drive(loop)
    assert task.cancelled(), f"a cancelled wait must end the task cancelled; it {outcome(task)}"
    assert registry.calls[-1] == ("remove", "sock"), (
        "whatever ends the wait, cancellation included, the registration must be removed "
        f"(try/finally); the calls were {registry.calls}")


def test_readiness_future_removes_the_registration_on_an_error(loop: Loop) -> None:
    registry, waiter = Registry(), Future(loop=loop)
    task = wait_task(loop, registry, waiter)
    drive(loop)
    waiter.set_exception(ConnectionResetError("gone"))
    drive(loop)
    assert task.done() and isinstance(task.exception(), ConnectionResetError), (
        f"an error set on the waiter must be raised by the wait; the task {outcome(task)}")
    assert registry.calls[-1] == ("remove", "sock"), (
        f"and the registration removed all the same; the calls were {registry.calls}")


# --- flow-control ---------------------------------------------------------------------------

@pytest.fixture
def writer_on(loop: Loop):
    from test_coroutines_streams import ScriptedSocket

    from tinyloop.coroutines.streams import StreamWriter
    sock = ScriptedSocket(fd=10_001)
    return sock, StreamWriter(sock, loop=loop, high_water=1000, low_water=200)  # type: ignore[arg-type]


def test_flow_control_pauses_only_above_the_high_water_mark(writer_on) -> None:
    sock, writer = writer_on
    writer.write(b"x" * 1000)
    assert writer._paused is False, (
        "with exactly high_water (1000) bytes buffered the writer must not pause: only 'more than "
        "self._high_water' does")
    writer.write(b"x")
    assert writer._paused is True, (
        "with 1001 bytes buffered (more than high_water, 1000) write() must pause "
        "(self._paused = True)")


def test_flow_control_resumes_at_the_low_water_mark_and_wakes_drain(loop: Loop, writer_on) -> None:
    sock, writer = writer_on
    done: list[int] = []

    async def producer() -> None:
        writer.write(b"x" * 1500)
        await writer.drain()
        done.append(writer.get_write_buffer_size())

    task = Task(producer(), loop=loop)
    drive(loop)
    assert not done and writer._drain_waiter is not None, (
        "above the high-water mark drain() must wait on a new Future kept in self._drain_waiter")
    sock.room = 1299
    writer._on_writable()  # 1500 -> 201: still above the low-water mark
    drive(loop)
    assert writer._paused and not done, (
        "with 201 bytes left (above low_water, 200) the writer must stay paused and drain() wait")
    sock.room = 1
    writer._on_writable()  # 201 -> 200: at the low-water mark
    assert writer._paused is False, (
        "with the buffer down to low_water (200) bytes or fewer, _on_writable must unpause")
    drive(loop)
    assert done == [200] and task.done(), (
        "and wake the drainer (self._wake_drain()), so drain() returns; "
        f"drain returned with {done} bytes buffered, the task {outcome(task)}")
    assert writer._drain_waiter is None, "after the wait, self._drain_waiter must be reset to None"


def test_flow_control_resumes_when_the_buffer_falls_below_the_low_water_mark(writer_on) -> None:
    sock, writer = writer_on
    writer.write(b"x" * 1500)
    assert writer._paused
    sock.room = 1450
    writer._on_writable()  # 1500 -> 50: well below the low-water mark (200)
    assert writer._paused is False, (
        "with the buffer down to 50 bytes (fewer than low_water, 200) _on_writable must unpause: "
        "the test is 'low_water bytes or fewer', not 'exactly'")


def test_flow_control_drain_returns_at_once_when_not_paused(loop: Loop, writer_on) -> None:
    sock, writer = writer_on
    done: list[bool] = []

    async def producer() -> None:
        writer.write(b"x" * 10)
        await writer.drain()
        done.append(True)

    Task(producer(), loop=loop)
    drive(loop)
    assert done == [True] and writer._drain_waiter is None, (
        "below the high-water mark drain() must return at once, with no waiter")


def test_flow_control_a_cancelled_drain_resets_its_waiter(loop: Loop, writer_on) -> None:
    sock, writer = writer_on

    async def producer() -> None:
        writer.write(b"x" * 1500)
        await writer.drain()

    task = Task(producer(), loop=loop)
    drive(loop)
    task.cancel()
    drive(loop)
    assert task.cancelled(), f"the draining task was cancelled; it {outcome(task)}"
    assert writer._drain_waiter is None, (
        "self._drain_waiter must be reset to None whatever ends the wait, cancellation included "
        "(try/finally)")
