# tests/conformance/test_running.py
#
# Running and scheduling: what AbstractEventLoop promises about run_forever,
# run_until_complete, stop, close, time, the call_* family (with context=),
# futures, tasks and their factories, async generators and the default
# executor's shutdown.  Source: the asyncio docs, "Event Loop", "Running and
# stopping the loop", "Scheduling callbacks", "Creating Futures and Tasks".
#
# Rules: every test runs on every loop (conftest.py); time is the loop's own
# clock, and no test waits more than a few tenths of a second for a timer.

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading

import pytest

from conformance.conftest import run

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="default")


# -- run_forever, run_until_complete, stop, close ----------------------------------------

def test_run_until_complete_returns_the_coroutines_result(loop):
    async def answer():
        await asyncio.sleep(0)
        return 42

    assert loop.run_until_complete(answer()) == 42
    assert not loop.is_running()


def test_run_until_complete_raises_what_the_future_raised(loop):
    async def fail():
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError):
        loop.run_until_complete(fail())


def test_run_until_complete_accepts_a_future_and_rejects_a_non_awaitable(loop):
    future = loop.create_future()
    loop.call_soon(future.set_result, "done")
    assert loop.run_until_complete(future) == "done"
    with pytest.raises(TypeError):
        loop.run_until_complete(42)


def test_run_until_complete_when_stopped_first_raises_runtime_error(loop):
    async def stop_then_wait():
        loop.stop()
        await asyncio.sleep(10)

    task = loop.create_task(stop_then_wait())
    with pytest.raises(RuntimeError):
        loop.run_until_complete(task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)


def test_stop_ends_run_forever_after_the_current_iteration(loop):
    log = []
    loop.call_soon(log.append, "a")
    loop.call_soon(loop.stop)
    loop.call_soon(log.append, "b")  # queued before stop ran: same iteration
    loop.run_forever()
    assert log == ["a", "b"]
    assert not loop.is_running()


def test_stop_before_run_forever_runs_one_iteration(loop):
    log = []
    loop.call_soon(log.append, 1)
    loop.stop()
    loop.run_forever()
    assert log == [1]
    loop.call_soon(log.append, 2)
    loop.stop()
    loop.run_forever()  # the loop can run again
    assert log == [1, 2]


def test_is_running_inside_and_outside(loop):
    seen = []
    loop.call_soon(lambda: seen.append(loop.is_running()))
    loop.call_soon(loop.stop)
    assert not loop.is_running()
    loop.run_forever()
    assert seen == [True]


def test_run_forever_inside_the_running_loop_raises(loop):
    async def nested():
        with pytest.raises(RuntimeError):
            loop.run_forever()

    run(loop, nested())


def test_run_until_complete_inside_the_running_loop_raises(loop):
    async def nested():
        coro = asyncio.sleep(0)
        with pytest.raises(RuntimeError):
            loop.run_until_complete(coro)
        coro.close()

    run(loop, nested())


def test_get_running_loop_and_get_event_loop_inside_callbacks_and_tasks(loop):
    seen = []

    async def inside():
        seen.append(asyncio.get_running_loop())
        seen.append(asyncio.get_event_loop())

    loop.call_soon(lambda: seen.append(asyncio.get_running_loop()))
    run(loop, inside())
    assert seen == [loop, loop, loop]
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_close_is_idempotent_and_refuses_new_work(loop):
    assert not loop.is_closed()
    loop.close()
    assert loop.is_closed()
    loop.close()
    with pytest.raises(RuntimeError):
        loop.call_soon(print)
    with pytest.raises(RuntimeError):
        loop.call_later(1, print)
    with pytest.raises(RuntimeError):
        loop.run_forever()
    with pytest.raises(RuntimeError):
        loop.run_until_complete(loop.create_future())


def test_close_while_running_raises(loop):
    errors = []

    def try_close():
        try:
            loop.close()
        except RuntimeError as exc:
            errors.append(exc)
        loop.stop()

    loop.call_soon(try_close)
    loop.run_forever()
    assert len(errors) == 1 and not loop.is_closed()


def test_time_is_monotonic_seconds(loop):
    start = loop.time()
    assert isinstance(start, float)

    async def nap():
        await asyncio.sleep(0.05)

    run(loop, nap())
    elapsed = loop.time() - start
    assert 0.04 <= elapsed < 5


# -- call_soon, call_later, call_at -------------------------------------------------------

def test_call_soon_runs_in_order_with_arguments(loop):
    log = []
    for i in range(5):
        loop.call_soon(log.append, i)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert log == [0, 1, 2, 3, 4]


def test_call_soon_returns_a_cancellable_handle(loop):
    log, errors = [], []
    loop.set_exception_handler(lambda loop, context: errors.append(context))
    handle = loop.call_soon(log.append, "cancelled")
    assert not handle.cancelled()  # asyncio.Handle's interface (uvloop's is no subclass)
    handle.cancel()
    assert handle.cancelled()
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert log == []
    assert errors == []  # skipped, not run (a cancelled handle's callback is None)


@pytest.mark.differs(loops=("uvloop",), reason="uvloop checks no callback, in debug mode or not")
def test_in_debug_mode_call_soon_refuses_non_callables_and_coroutine_functions(loop):
    async def coroutine_function():
        pass

    loop.set_debug(True)  # asyncio checks the callback in debug mode only
    with pytest.raises(TypeError):
        loop.call_soon(42)
    with pytest.raises(TypeError):
        loop.call_soon(coroutine_function)


def test_call_later_and_call_at_fire_in_deadline_order(loop):
    log = []
    now = loop.time()
    loop.call_later(0.06, log.append, "later-0.06")
    loop.call_at(now + 0.02, log.append, "at-0.02")
    loop.call_later(0.04, log.append, "later-0.04")
    loop.call_later(0.08, loop.stop)
    loop.run_forever()
    assert log == ["at-0.02", "later-0.04", "later-0.06"]


def test_call_later_returns_a_timer_handle_with_when(loop):
    before = loop.time()
    handle = loop.call_later(10, print)
    assert not handle.cancelled()
    # 2 ms of slack: uvloop's clock is libuv's, in whole milliseconds.
    assert before + 10 - 0.002 <= handle.when() <= loop.time() + 10 + 0.002
    handle.cancel()
    assert handle.cancelled()


def test_a_timer_does_not_fire_early(loop):
    fired = []
    start = loop.time()
    loop.call_later(0.05, lambda: (fired.append(loop.time()), loop.stop()))
    loop.run_forever()
    assert fired[0] - start >= 0.05 - 0.001  # clock resolution


def test_cancelled_timer_never_fires(loop):
    log = []
    handle = loop.call_later(0.01, log.append, "cancelled")
    loop.call_later(0.03, log.append, "kept")
    loop.call_later(0.05, loop.stop)
    handle.cancel()
    loop.run_forever()
    assert log == ["kept"]


def test_call_later_with_none_delay_raises_type_error(loop):
    with pytest.raises(TypeError):
        loop.call_later(None, print)
    with pytest.raises(TypeError):
        loop.call_at(None, print)


@pytest.mark.parametrize("method", ["call_soon", "call_soon_threadsafe", "call_later", "call_at"])
def test_every_call_method_runs_in_the_context_given(loop, method):
    context = contextvars.copy_context()
    context.run(var.set, "given")
    seen = []

    def callback():
        seen.append(var.get())
        loop.stop()

    token = var.set("current")
    if method == "call_later":
        handle = loop.call_later(0, callback, context=context)
    elif method == "call_at":
        handle = loop.call_at(loop.time(), callback, context=context)
    else:
        handle = getattr(loop, method)(callback, context=context)
    loop.run_forever()
    var.reset(token)
    assert seen == ["given"]
    handle.cancel()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Handle.get_context() is new in 3.12")
@pytest.mark.differs(loops=("uvloop",), reason="uvloop's handles have no get_context()")
@pytest.mark.parametrize("method", ["call_soon", "call_later"])
def test_a_handle_gives_its_context(loop, method):
    context = contextvars.copy_context()
    if method == "call_later":
        handle = loop.call_later(10, print, context=context)
    else:
        handle = loop.call_soon(print, context=context)
    assert handle.get_context() is context
    handle.cancel()


def test_without_context_a_callback_runs_in_a_copy_of_the_current_context(loop):
    seen = []

    def callback():
        seen.append(var.get())
        var.set("changed in the callback")

    token = var.set("at call_soon")
    loop.call_soon(callback)
    var.reset(token)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == ["at call_soon"]
    assert var.get() == "default"


def test_call_soon_threadsafe_wakes_a_waiting_loop(loop):
    log = []

    def from_thread():
        loop.call_soon_threadsafe(log.append, threading.current_thread().name)
        loop.call_soon_threadsafe(loop.stop)

    # Nothing else is scheduled: the loop blocks in the selector until woken.
    thread = threading.Timer(0.05, from_thread)
    thread.start()
    safety = loop.call_later(10, loop.stop)
    loop.run_forever()
    thread.join()
    safety.cancel()
    assert log == [thread.name]


def test_an_exception_in_a_callback_goes_to_the_handler_and_the_loop_goes_on(loop):
    contexts = []
    loop.set_exception_handler(lambda loop, context: contexts.append(context))
    log = []

    def boom():
        raise ValueError("in a callback")

    loop.call_soon(boom)
    loop.call_soon(log.append, "after")
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert log == ["after"]
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], ValueError)
    assert "handle" in contexts[0] and "message" in contexts[0]


# -- Futures and tasks ------------------------------------------------------------------

def test_create_future_is_an_asyncio_future_on_this_loop(loop):
    future = loop.create_future()
    assert asyncio.isfuture(future)
    assert future.get_loop() is loop
    loop.call_soon(future.set_result, 7)
    assert loop.run_until_complete(future) == 7


def test_create_task_with_name_and_context(loop):
    context = contextvars.copy_context()
    context.run(var.set, "task context")

    async def body():
        return var.get(), asyncio.current_task().get_name()

    task = loop.create_task(body(), name="the-name", context=context)
    assert isinstance(task, asyncio.Task)
    assert task.get_name() == "the-name"
    assert loop.run_until_complete(task) == ("task context", "the-name")


def test_a_task_cancelled_while_waiting_raises_cancelled_error(loop):
    async def sleeper():
        await asyncio.sleep(10)

    async def main():
        task = asyncio.create_task(sleeper())
        await asyncio.sleep(0)
        task.cancel("because")
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert run(loop, main())


def test_task_factory_is_used_and_can_be_reset(loop):
    made = []

    def factory(loop, coro, **kwargs):
        task = asyncio.Task(coro, loop=loop, **kwargs)
        made.append(task)
        return task

    assert loop.get_task_factory() is None
    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def body():
        return "ok"

    task = loop.create_task(body(), name="named")
    assert made == [task] and task.get_name() == "named"
    assert loop.run_until_complete(task) == "ok"
    loop.set_task_factory(None)
    assert loop.get_task_factory() is None
    with pytest.raises(TypeError):
        loop.set_task_factory(42)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.eager_task_factory is new in 3.12")
@pytest.mark.differs(loops=("uvloop",), when=sys.version_info >= (3, 13), reason=(
    "on 3.13 uvloop passes eager_start= to the task factory, which asyncio's "
    "eager_task_factory does not take (TypeError)"))
def test_eager_task_factory_runs_the_first_step_at_once(loop):
    log = []

    async def body():
        log.append("first step")
        await asyncio.sleep(0)
        log.append("second step")
        return "result"

    async def main():
        loop.set_task_factory(asyncio.eager_task_factory)
        task = loop.create_task(body())
        log.append("created")
        return await task

    assert run(loop, main()) == "result"
    assert log == ["first step", "created", "second step"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.eager_task_factory is new in 3.12")
@pytest.mark.differs(loops=("uvloop",), when=sys.version_info >= (3, 13), reason=(
    "on 3.13 uvloop passes eager_start= to the task factory, which asyncio's "
    "eager_task_factory does not take (TypeError)"))
def test_an_eager_task_that_finishes_at_once_is_done_on_return(loop):
    async def body():
        return "at once"

    async def main():
        loop.set_task_factory(asyncio.eager_task_factory)
        task = loop.create_task(body())
        return task.done(), task.result()

    assert run(loop, main()) == (True, "at once")


def test_gather_wait_for_and_timeouts_run_on_the_loop(loop):
    async def value(x, delay):
        await asyncio.sleep(delay)
        return x

    async def main():
        results = await asyncio.gather(value(1, 0.02), value(2, 0.01), value(3, 0))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 0.01)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01) as cm:
                await asyncio.sleep(10)
        return results, cm.expired()

    assert run(loop, main()) == ([1, 2, 3], True)


# -- Async generators and the default executor -------------------------------------------

def test_shutdown_asyncgens_runs_the_finally_of_an_unfinished_generator(loop):
    log = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            await asyncio.sleep(0)
            log.append("finalised")

    gen = agen()  # held here, so only shutdown_asyncgens can close it

    async def main():
        return await gen.__anext__()

    assert loop.run_until_complete(main()) == 1
    assert log == []
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert log == ["finalised"]


def test_an_abandoned_async_generator_is_finalised_on_the_loop(loop):
    log = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            log.append(asyncio.get_running_loop() is loop)

    async def main():
        gen = agen()
        await gen.__anext__()
        del gen  # collected now: the loop's finalizer hook schedules aclose()
        for _ in range(5):
            await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert log == [True]


def test_shutdown_default_executor_waits_for_running_work(loop):
    import time

    done = []

    def work():
        time.sleep(0.05)
        done.append(True)

    async def main():
        future = loop.run_in_executor(None, work)
        await loop.shutdown_default_executor()
        assert done == [True]
        await future
        with pytest.raises(RuntimeError):
            loop.run_in_executor(None, work)

    run(loop, main())


def test_a_closed_loop_refuses_tasks_and_threadsafe_calls(loop):
    async def body():
        pass

    loop.close()
    coro = body()
    with pytest.raises(RuntimeError):
        loop.create_task(coro)
    coro.close()
    with pytest.raises(RuntimeError):
        loop.call_soon_threadsafe(print)


@pytest.mark.differs(loops=("uvloop",), reason="uvloop checks no callback, in debug mode or not")
def test_in_debug_mode_call_soon_refuses_a_partial_of_a_coroutine_function(loop):
    import functools

    async def coroutine_function(x):
        pass

    loop.set_debug(True)  # asyncio asks inspect.iscoroutinefunction, which sees through partial
    try:
        handle = loop.call_soon(functools.partial(coroutine_function, 1))
    except TypeError:
        return
    handle.cancel()  # accepted: never let it run (it would make a coroutine and drop it)
    pytest.fail("call_soon accepted a partial of a coroutine function")
