"""Unit tests of our Future and Task (tinyloop.coroutines.futures and .tasks), on a virtual clock.

Every test drives the reactor itself with ``fakes.run_until_idle``, so time
passes only when the loop would sleep, and every interleaving is the same
on every run.  ``run()`` and the thread pool are tested on a real loop.
"""

from __future__ import annotations

import gc
import threading
import types
from collections.abc import Coroutine
from typing import Any

import pytest
from fakes import VirtualClock, run_until_idle

from tinyloop.callbacks.loop import Loop
from tinyloop.coroutines.futures import CancelledError, Future, InvalidStateError, run_in_executor
from tinyloop.coroutines.tasks import (Task, all_tasks, current_task, ensure_future, gather, run,
                                       sleep, wait_for)


@pytest.fixture(autouse=True)
def collect_garbage():
    """Free each test's finished tasks (and report their lost exceptions) within the test."""
    yield
    gc.collect()


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()  # from 0: the tests read loop.time() as seconds since the start


@pytest.fixture
def loop(loop: Loop) -> Loop:
    """tests/conftest.py's loop, its errors kept in ``loop.errors`` instead of logged."""
    errors: list[dict] = []
    loop.set_exception_handler(lambda lp, context: errors.append(context))
    loop.errors = errors  # type: ignore[attr-defined]
    return loop


def drive(loop: Loop) -> None:
    run_until_idle(loop, loop._selector)  # type: ignore[arg-type]


def finish(loop: Loop, coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` as a task until the loop is idle; return its result (or raise)."""
    task = Task(coro, loop=loop)
    drive(loop)
    assert task.done(), f"{task!r} is still waiting"
    return task.result()


# -- Future ------------------------------------------------------------------------------


def test_future_states(loop: Loop) -> None:
    future = Future(loop=loop)
    assert not future.done()
    with pytest.raises(InvalidStateError):
        future.result()
    future.set_result(42)
    assert future.done() and future.result() == 42 and future.exception() is None
    with pytest.raises(InvalidStateError):
        future.set_result(43)
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError())
    assert future.cancel() is False


def test_future_exception_from_a_class(loop: Loop) -> None:
    future = Future(loop=loop)
    future.set_exception(KeyError)
    assert isinstance(future.exception(), KeyError)
    with pytest.raises(KeyError):
        future.result()


def test_stop_iteration_cannot_be_set(loop: Loop) -> None:
    with pytest.raises(TypeError):
        Future(loop=loop).set_exception(StopIteration())


def test_cancel_with_a_message(loop: Loop) -> None:
    future = Future(loop=loop)
    assert future.cancel("enough") is True
    assert future.cancelled() and future.done()
    with pytest.raises(CancelledError, match="enough"):
        future.result()
    assert future.cancel() is False


def test_cancelled_error_is_not_an_exception() -> None:
    assert issubclass(CancelledError, BaseException) and not issubclass(CancelledError, Exception)


def test_done_callbacks_run_through_the_loop_not_inside_set_result(loop: Loop) -> None:
    log: list[str] = []
    future = Future(loop=loop)
    future.add_done_callback(lambda f: log.append(f"first {f.result()}"))
    future.add_done_callback(lambda f: log.append("second"))
    future.set_result("x")
    assert log == []  # not yet: scheduled with call_soon
    loop.run_once()
    assert log == ["first x", "second"]
    future.add_done_callback(lambda f: log.append("late"))  # already done: soon, too
    assert log == ["first x", "second"]
    loop.run_once()
    assert log[-1] == "late"


def test_remove_done_callback_counts(loop: Loop) -> None:
    future = Future(loop=loop)

    def callback(f: Future) -> None:
        raise AssertionError("removed")

    future.add_done_callback(callback)
    future.add_done_callback(callback)
    assert future.remove_done_callback(callback) == 2
    future.set_result(None)
    drive(loop)


def test_await_yields_the_future_itself(loop: Loop) -> None:
    # The lesson of Future.__await__, by hand, without a Task: the coroutine
    # hands the future it waits on up to whoever called send().
    future = Future(loop=loop)

    async def waiter() -> str:
        return await future

    coro = waiter()
    assert coro.send(None) is future
    future.set_result("done")
    with pytest.raises(StopIteration) as stop:
        coro.send(None)
    assert stop.value.value == "done"


def test_awaiting_a_done_future_does_not_suspend(loop: Loop) -> None:
    future = Future(loop=loop)
    future.set_result(1)

    async def waiter() -> int:
        return await future

    with pytest.raises(StopIteration):
        waiter().send(None)


def test_an_exception_nobody_retrieved_is_reported_when_collected(loop: Loop) -> None:
    future = Future(loop=loop)
    future.set_exception(ValueError("lost"))
    del future
    gc.collect()
    [context] = loop.errors  # type: ignore[attr-defined]
    assert "never retrieved" in context["message"] and isinstance(context["exception"], ValueError)


def test_a_retrieved_exception_is_not_reported(loop: Loop) -> None:
    future = Future(loop=loop)
    future.set_exception(ValueError("seen"))
    future.exception()
    del future
    gc.collect()
    assert loop.errors == []  # type: ignore[attr-defined]


def test_a_future_needs_a_loop() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        Future()


# -- Task: stepping --------------------------------------------------------------------------


def test_a_task_returns_what_its_coroutine_returns(loop: Loop) -> None:
    async def answer() -> int:
        return 42

    assert finish(loop, answer()) == 42


def test_a_task_resumes_with_the_awaited_result(loop: Loop) -> None:
    future = Future(loop=loop)
    loop.call_later(1, future.set_result, "from a callback")

    async def waiter() -> str:
        return await future

    assert finish(loop, waiter()) == "from a callback"
    assert loop.time() == pytest.approx(1)


def test_an_awaited_exception_is_raised_at_the_await(loop: Loop) -> None:
    future = Future(loop=loop)
    loop.call_soon(future.set_exception, ValueError("inside"))

    async def waiter() -> str:
        try:
            await future
        except ValueError as error:
            return f"caught {error}"
        return "not raised"

    assert finish(loop, waiter()) == "caught inside"


def test_a_task_that_raises_holds_the_exception(loop: Loop) -> None:
    async def failing() -> None:
        raise KeyError("out")

    task = Task(failing(), loop=loop)
    drive(loop)
    assert isinstance(task.exception(), KeyError)


def test_a_task_is_awaitable(loop: Loop) -> None:
    async def child() -> str:
        await sleep(1)
        return "child"

    async def parent() -> list[str]:
        task = Task(child(), loop=loop)
        return [await task, await task]  # a done task gives its result again

    assert finish(loop, parent()) == ["child", "child"]


def test_a_task_starts_on_the_next_iteration(loop: Loop) -> None:
    log: list[str] = []

    async def body() -> None:
        log.append("ran")

    Task(body(), loop=loop)
    assert log == []
    loop.run_once()
    assert log == ["ran"]


def test_a_bare_yield_lets_the_other_tasks_run(loop: Loop) -> None:
    log: list[str] = []

    async def worker(name: str) -> None:
        for i in range(3):
            log.append(f"{name}{i}")
            await sleep(0)

    Task(worker("a"), loop=loop)
    Task(worker("b"), loop=loop)
    drive(loop)
    assert log == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_a_bad_yield_is_thrown_back_into_the_coroutine(loop: Loop) -> None:
    @types.coroutine
    def yield_a_number():
        yield 42

    async def confused() -> str:
        try:
            await yield_a_number()
        except RuntimeError as error:
            return str(error)
        return "no error"

    assert "yielded 42" in finish(loop, confused())


def test_a_task_cannot_await_itself(loop: Loop) -> None:
    async def narcissus() -> None:
        await current_task()  # type: ignore[misc]

    with pytest.raises(RuntimeError, match="itself"):
        finish(loop, narcissus())


def test_a_task_refuses_a_non_coroutine(loop: Loop) -> None:
    with pytest.raises(TypeError):
        Task(lambda: None, loop=loop)  # type: ignore[arg-type]


def test_current_task(loop: Loop) -> None:
    seen: list[Any] = []

    async def body() -> None:
        seen.append(current_task())

    task = Task(body(), loop=loop)
    drive(loop)
    assert seen == [task]
    assert current_task(loop) is None


def test_ensure_future(loop: Loop) -> None:
    future = Future(loop=loop)
    assert ensure_future(future) is future

    async def coro() -> int:
        return 1

    class Awaitable:
        def __await__(self):
            return coro().__await__()

    assert isinstance(ensure_future(coro(), loop=loop), Task)
    task = ensure_future(Awaitable(), loop=loop)
    drive(loop)
    assert task.result() == 1
    with pytest.raises(TypeError):
        ensure_future(42)  # type: ignore[arg-type]


# -- Task: cancellation ------------------------------------------------------------------------


def test_cancel_reaches_the_awaited_future(loop: Loop) -> None:
    future = Future(loop=loop)
    log: list[str] = []

    async def waiter() -> None:
        try:
            await future
        except CancelledError as error:
            log.append(f"caught {error.args}")
            raise
        finally:
            log.append("finally")

    task = Task(waiter(), loop=loop)
    drive(loop)
    assert task.cancel("stop") is True
    assert future.cancelled()  # cancellation went down to what the task waits on
    drive(loop)
    assert log == ["caught ('stop',)", "finally"]
    assert task.cancelled()
    with pytest.raises(CancelledError, match="stop"):
        task.result()


def test_a_task_may_catch_its_cancellation_and_go_on(loop: Loop) -> None:
    async def stubborn() -> str:
        try:
            await sleep(10)
        except CancelledError:
            pass
        await sleep(1)
        return "finished anyway"

    task = Task(stubborn(), loop=loop)
    loop.call_later(1, task.cancel)
    drive(loop)
    assert task.result() == "finished anyway"
    assert loop.time() == pytest.approx(2)


def test_cancel_before_the_first_step(loop: Loop) -> None:
    log: list[str] = []

    async def body() -> None:
        log.append("ran")

    task = Task(body(), loop=loop)
    task.cancel()
    drive(loop)
    assert task.cancelled() and log == []


def test_a_task_cancelling_itself_gets_it_at_its_next_await(loop: Loop) -> None:
    log: list[str] = []

    async def body() -> None:
        current_task().cancel()
        log.append("still running this step")
        try:
            await sleep(5)
        except CancelledError:
            log.append("cancelled at the await")
            raise

    task = Task(body(), loop=loop)
    drive(loop)
    assert log == ["still running this step", "cancelled at the await"]
    assert task.cancelled()
    assert loop.time() < 5


def test_cancel_a_done_task(loop: Loop) -> None:
    async def body() -> int:
        return 1

    task = Task(body(), loop=loop)
    drive(loop)
    assert task.cancel() is False and task.result() == 1


def test_cancelling_a_sleep_cancels_its_timer(loop: Loop) -> None:
    task = Task(sleep(100), loop=loop)
    loop.call_later(1, task.cancel)
    drive(loop)
    assert task.cancelled()
    assert all(timer.cancelled() for timer in loop._scheduled)
    assert loop.time() == pytest.approx(1)  # the loop did not sleep on a dead timer


def test_cancelling_a_task_cancels_the_task_it_awaits(loop: Loop) -> None:
    async def child() -> None:
        await sleep(10)

    async def parent(inner: Task) -> None:
        await inner

    inner = Task(child(), loop=loop)
    outer = Task(parent(inner), loop=loop)
    drive_until = loop.time() + 1
    loop.call_at(drive_until, outer.cancel)
    drive(loop)
    assert inner.cancelled() and outer.cancelled()


# -- sleep, gather, wait_for -------------------------------------------------------------------


def test_sleep_returns_its_result_after_the_delay(loop: Loop) -> None:
    assert finish(loop, sleep(2.5, "woke")) == "woke"
    assert loop.time() == pytest.approx(2.5)


def test_gather_keeps_the_order_of_its_arguments(loop: Loop) -> None:
    async def main() -> list[Any]:
        return await gather(sleep(3, "slow"), sleep(1, "fast"), sleep(2, "middle"))

    assert finish(loop, main()) == ["slow", "fast", "middle"]
    assert loop.time() == pytest.approx(3)  # concurrently, not one after another


def test_gather_of_nothing(loop: Loop) -> None:
    async def main() -> list[Any]:
        return await gather()

    assert finish(loop, main()) == []


def test_gather_fails_with_the_first_exception(loop: Loop) -> None:
    async def failing() -> None:
        await sleep(1)
        raise ValueError("first")

    async def main() -> None:
        await gather(sleep(5), failing())

    with pytest.raises(ValueError, match="first"):
        finish(loop, main())


def test_gather_with_return_exceptions(loop: Loop) -> None:
    async def failing() -> None:
        raise ValueError("kept")

    async def main() -> list[Any]:
        return await gather(sleep(1, "ok"), failing(), return_exceptions=True)

    ok, error = finish(loop, main())
    assert ok == "ok" and isinstance(error, ValueError)


def test_cancelling_gather_cancels_the_children(loop: Loop) -> None:
    children: list[Task] = []

    async def main() -> None:
        children.extend([Task(sleep(10), loop=loop), Task(sleep(20), loop=loop)])
        await gather(*children)

    task = Task(main(), loop=loop)
    loop.call_later(1, task.cancel)
    drive(loop)
    assert task.cancelled()
    assert all(child.cancelled() for child in children)
    assert loop.time() < 10


def test_wait_for_in_time(loop: Loop) -> None:
    async def main() -> str:
        return await wait_for(sleep(1, "in time"), timeout=2)

    assert finish(loop, main()) == "in time"


def test_wait_for_times_out_and_cancels_the_inner_work(loop: Loop) -> None:
    inner_log: list[str] = []

    async def slow() -> None:
        try:
            await sleep(10)
        finally:
            inner_log.append("inner cleaned up")

    async def main() -> None:
        await wait_for(slow(), timeout=2)

    with pytest.raises(TimeoutError):
        finish(loop, main())
    assert inner_log == ["inner cleaned up"]
    assert loop.time() == pytest.approx(2)


def test_cancelling_the_caller_of_wait_for_cancels_the_inner_work(loop: Loop) -> None:
    inner = Future(loop=loop)

    async def main() -> None:
        await wait_for(inner, timeout=10)

    task = Task(main(), loop=loop)
    loop.call_later(1, task.cancel)
    drive(loop)
    assert task.cancelled() and inner.cancelled()


def test_wait_for_without_a_timeout(loop: Loop) -> None:
    async def main() -> str:
        return await wait_for(sleep(100, "patient"), None)

    assert finish(loop, main()) == "patient"


# -- run() and threads (a real loop) ---------------------------------------------------------


def test_run_returns_the_result_and_closes_the_loop() -> None:
    loops: list[Loop] = []

    async def main() -> str:
        loops.append(current_task().get_loop())
        await sleep(0.01)
        return "done"

    assert run(main()) == "done"
    assert loops[0].is_closed()


def test_run_propagates_the_exception_of_main() -> None:
    async def main() -> None:
        raise LookupError("from main")

    with pytest.raises(LookupError):
        run(main())


def test_run_cancels_the_tasks_left_and_runs_their_finally() -> None:
    log: list[str] = []

    async def background() -> None:
        try:
            await sleep(3600)
        finally:
            log.append("background cleaned up")

    async def main() -> None:
        Task(background(), loop=current_task().get_loop())
        await sleep(0.01)

    run(main())
    assert log == ["background cleaned up"]


def test_keyboard_interrupt_out_of_run_still_cleans_up() -> None:
    log: list[str] = []

    async def holder() -> None:
        try:
            await sleep(3600)
        finally:
            log.append("holder cleaned up")

    async def main() -> None:
        loop = current_task().get_loop()
        Task(holder(), loop=loop)

        def interrupt() -> None:
            raise KeyboardInterrupt

        loop.call_later(0.01, interrupt)
        await sleep(3600)

    with pytest.raises(KeyboardInterrupt):
        run(main())
    assert log == ["holder cleaned up"]


def test_run_in_executor_runs_in_another_thread_and_wakes_the_loop() -> None:
    def blocking_work(x: int) -> tuple[int, str]:
        return x * 2, threading.current_thread().name

    async def main() -> tuple[tuple[int, str], str]:
        return await run_in_executor(None, blocking_work, 21), threading.current_thread().name

    (value, worker), loop_thread = run(main())
    assert value == 42 and worker != loop_thread


def test_run_in_executor_propagates_the_exception() -> None:
    def failing() -> None:
        raise OSError("in the thread")

    async def main() -> None:
        await run_in_executor(None, failing)

    with pytest.raises(OSError, match="in the thread"):
        run(main())


def test_all_tasks_lists_the_pending_ones(loop: Loop) -> None:
    task = Task(sleep(1), loop=loop)
    assert all_tasks(loop) == {task}
    drive(loop)
    assert all_tasks(loop) == set()


# -- ordering ------------------------------------------------------------------------------------


def test_sleep_zero_is_not_a_timer_it_resumes_before_a_zero_delay_timer(loop: Loop) -> None:
    # The coroutine chapter's ordering rule, pinned: ``await sleep(0)`` is a
    # bare yield, so the task's next step goes on the ready queue (call_soon);
    # a timer with delay 0 set at the same moment waits for step 3 of the
    # next iteration, after the ready queue's old entries.
    log: list[str] = []

    async def body() -> None:
        loop.call_later(0, log.append, "timer(0)")
        loop.call_soon(log.append, "call_soon")
        await sleep(0)
        log.append("after sleep(0)")

    Task(body(), loop=loop)
    drive(loop)
    assert log == ["call_soon", "after sleep(0)", "timer(0)"]


def test_a_woken_task_runs_one_iteration_after_its_future_completes(loop: Loop) -> None:
    # set_result() does not run the waiting task: it schedules the task's
    # wake-up with call_soon, so the task resumes in the next iteration.
    future = Future(loop=loop)
    log: list[str] = []

    async def waiter() -> None:
        await future
        log.append("task resumed")

    def complete() -> None:
        future.set_result(None)
        log.append("set_result returned")

    Task(waiter(), loop=loop)
    loop.call_later(1, complete)
    drive(loop)
    assert log == ["set_result returned", "task resumed"]
