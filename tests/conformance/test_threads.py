# tests/conformance/test_threads.py
#
# Threads: run_in_executor, the default executor, asyncio.to_thread.
# Source: the asyncio docs, "Executing code in thread or process pools".

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading

import pytest

from conformance.conftest import run

var: contextvars.ContextVar[str] = contextvars.ContextVar("threads_var", default="default")


def test_run_in_executor_runs_in_another_thread_and_returns_the_result(loop):
    async def main():
        return await loop.run_in_executor(None, lambda x: (x * 2, threading.get_ident()), 21)

    value, ident = run(loop, main())
    assert value == 42 and ident != threading.get_ident()


def test_run_in_executor_raises_what_the_function_raised(loop):
    def fail():
        raise KeyError("in a thread")

    async def main():
        await loop.run_in_executor(None, fail)

    with pytest.raises(KeyError):
        run(loop, main())


def test_run_in_executor_with_an_explicit_executor(loop):
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="explicit") as pool:
        async def main():
            return await loop.run_in_executor(pool, lambda: threading.current_thread().name)

        assert run(loop, main()).startswith("explicit")


def test_set_default_executor_is_used(loop):
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="default-pool")
    loop.set_default_executor(pool)

    async def main():
        return await loop.run_in_executor(None, lambda: threading.current_thread().name)

    assert run(loop, main()).startswith("default-pool")


@pytest.mark.differs(loops=("uvloop",), reason="uvloop accepts any object as the default executor")
def test_set_default_executor_refuses_what_is_not_a_thread_pool(loop):
    try:
        with pytest.raises(TypeError):
            loop.set_default_executor(object())
    finally:  # where it was accepted, leave the loop an executor it can shut down
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(1))


def test_to_thread_carries_the_context(loop):
    async def main():
        var.set("in the task")
        return await asyncio.to_thread(var.get)

    assert run(loop, main()) == "in the task"


def test_many_executor_calls_complete(loop):
    async def main():
        return await asyncio.gather(*[loop.run_in_executor(None, pow, i, 2) for i in range(50)])

    assert run(loop, main()) == [i * i for i in range(50)]


def test_in_debug_mode_run_in_executor_refuses_a_coroutine_function(loop):
    async def coroutine_function():
        pass

    loop.set_debug(True)
    with pytest.raises(TypeError):
        loop.run_in_executor(None, coroutine_function)
