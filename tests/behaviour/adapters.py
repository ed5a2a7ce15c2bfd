"""The adapters of the behaviour suite: one per loop, found by the stage's name.

Each adapter is a mixin that turns the suite's "run this function" into the
loop's own unit of work (see ``behaviour/__init__.py`` for the methods).
The loop itself comes from the stage registry: ``make_loop`` calls the
factory that ``tinyloop/stages.py`` names in the stage's ``loop`` field, with
the suite's virtual clock and scripted selector.  So a stage that gains a
``loop`` needs an adapter here (``ADAPTERS``; a test checks) and a test
module that runs the suite with it (``tests/test_behaviour_<stage>.py``).

The asyncio reference row (``AsyncioReference``) runs the same adapter as
``aio`` on the standard library's own selector loop.  Discussion: asyncio
takes a ``selector`` argument but no clock; its loop reads the time only
through ``self.time()`` (``_run_once`` and ``call_later`` both do), so a
subclass that answers ``time()`` from the virtual clock injects one.
CPython's own tests do the same (``test_utils.TestLoop``).
"""

from __future__ import annotations

import asyncio
import gc
import pkgutil
import socket
from collections.abc import Callable
from typing import Any

from fakes import run_until_idle as run_reactor_until_idle

from tinyloop import stages
from tinyloop.callbacks import loop as reactor

__all__ = ["ADAPTERS", "AsyncioReference", "AsyncioTasks", "Callbacks", "Coroutines",
           "Generators", "YieldFrom"]


class StageLoop:
    """What every adapter shares: the stage's loop, built by its registry factory."""

    stage: str  # the name of the stage in tinyloop/stages.py

    def make_stage_loop(self) -> Any:
        factory = pkgutil.resolve_name(stages.get(self.stage).loop)  # type: ignore[arg-type]
        loop = factory(selector=self.selector, clock=self.clock)  # type: ignore[attr-defined]
        loop.set_exception_handler(
            lambda loop, context: self.errors.append(context["exception"]))  # type: ignore[attr-defined]
        return loop

    def now(self) -> float:
        return self.loop.time()  # type: ignore[attr-defined]


class Callbacks(StageLoop):
    """Part II's reactor: work is a plain callback; a token is its Handle (or the socket, for a reader)."""

    stage = "callbacks"

    def make_loop(self) -> None:
        self.loop = self.make_stage_loop()

    def close_loop(self) -> None:
        self.loop.close()

    def soon(self, fn: Callable[[], object]) -> Any:
        return self.loop.call_soon(fn)

    def schedule(self, delay: float, fn: Callable[[], object]) -> Any:
        return self.loop.call_later(delay, fn)

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        def once() -> None:
            self.loop.remove_reader(sock)
            fn()

        self.loop.add_reader(sock, once)
        return sock

    def cancel(self, token: Any) -> None:
        if isinstance(token, reactor.Handle):
            token.cancel()
        else:
            self.loop.remove_reader(token)

    def run_until_idle(self) -> None:
        run_reactor_until_idle(self.loop, self.selector)  # type: ignore[attr-defined]


class Generators(StageLoop):
    """The generator-stack scheduler on the reactor: work is a task; ``cancel`` is Scheduler.cancel.

    The stack scheduler's tasks call traps with ``yield``.
    """

    stage = "generators"

    def _scheduler_class(self) -> type:
        from tinyloop.generators.scheduler import Scheduler
        return Scheduler

    def make_loop(self) -> None:
        self.loop = self.make_stage_loop()
        # A scheduler bug that escapes into the reactor is an error too (the
        # reactor's handler, above); a task's own error comes through on_error.
        self.scheduler = self._scheduler_class()(
            self.loop, on_error=lambda task, error: self.errors.append(error))  # type: ignore[attr-defined]

    def close_loop(self) -> None:
        self.scheduler.close()
        self.loop.close()

    def soon(self, fn: Callable[[], object]) -> Any:
        def body():
            fn()
            return
            yield  # pragma: no cover  (a generator that never waits)

        return self.scheduler.spawn(body())

    def schedule(self, delay: float, fn: Callable[[], object]) -> Any:
        from tinyloop.generators.traps import sleep

        def body():
            yield sleep(delay)
            fn()

        return self.scheduler.spawn(body())

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        from tinyloop.generators.traps import read_wait

        def body():
            yield read_wait(sock)
            fn()

        return self.scheduler.spawn(body())

    def cancel(self, token: Any) -> None:
        self.scheduler.cancel(token)

    def run_until_idle(self) -> None:
        run_reactor_until_idle(self.loop, self.selector)  # type: ignore[attr-defined]


class YieldFrom(Generators):
    """The same, on the yield-from scheduler: traps are called with ``yield from``."""

    stage = "yieldfrom"

    def _scheduler_class(self) -> type:
        from tinyloop.generators.yieldfrom import YieldFromScheduler
        return YieldFromScheduler

    def schedule(self, delay: float, fn: Callable[[], object]) -> Any:
        from tinyloop.generators.traps import sleep

        def body():
            yield from sleep(delay)
            fn()

        return self.scheduler.spawn(body())

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        from tinyloop.generators.traps import read_wait

        def body():
            yield from read_wait(sock)
            fn()

        return self.scheduler.spawn(body())


class Coroutines(StageLoop):
    """Part II's own Future and Task on the reactor: work is a Task; ``cancel`` is Task.cancel().

    ``Task.cancel()`` must reach the future the task awaits (the sleep's
    timer, the socket's reader).
    """

    stage = "coroutines"

    def make_loop(self) -> None:
        self.loop = self.make_stage_loop()

    def close_loop(self) -> None:
        self.loop.close()

    def _task(self, coro: Any) -> Any:
        from tinyloop.coroutines.tasks import Task
        return Task(coro, loop=self.loop)

    def soon(self, fn: Callable[[], object]) -> Any:
        async def call() -> None:
            fn()

        return self._task(call())

    def schedule(self, delay: float, fn: Callable[[], object]) -> Any:
        from tinyloop.coroutines.tasks import sleep

        async def sleep_then_call() -> None:
            await sleep(delay)
            fn()

        return self._task(sleep_then_call())

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        from tinyloop.coroutines.streams import wait_readable

        async def wait_then_call() -> None:
            await wait_readable(sock)
            fn()

        return self._task(wait_then_call())

    def cancel(self, token: Any) -> None:
        token.cancel()

    def run_until_idle(self) -> None:
        run_reactor_until_idle(self.loop, self.selector)  # type: ignore[attr-defined]
        # A failed task nobody awaits reports its exception when it is
        # collected ("Task exception was never retrieved"); the exception's
        # traceback refers to the task's frame, a cycle only gc.collect frees.
        gc.collect()


class AsyncioTasks(StageLoop):
    """An asyncio event loop: work is an asyncio Task made by ``loop.create_task``.

    ``schedule`` awaits ``asyncio.sleep``; ``wait_readable`` awaits a future
    that an ``add_reader`` callback completes, and removes the reader when the
    future is done (or cancelled: ``Task.cancel()`` reaches it).  Written
    against the public API only, so the same adapter runs the asyncio
    reference row.
    """

    stage = "aio"

    def make_loop(self) -> None:
        self.loop = self.make_stage_loop()

    def close_loop(self) -> None:
        self.loop.close()

    def soon(self, fn: Callable[[], object]) -> Any:
        async def call() -> None:
            fn()

        return self.loop.create_task(call())

    def schedule(self, delay: float, fn: Callable[[], object]) -> Any:
        async def sleep_then_call() -> None:
            await asyncio.sleep(delay)
            fn()

        return self.loop.create_task(sleep_then_call())

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        async def wait_then_call() -> None:
            readable = self.loop.create_future()
            self.loop.add_reader(sock, lambda: readable.done() or readable.set_result(None))
            readable.add_done_callback(lambda _: self.loop.remove_reader(sock))
            await readable
            fn()

        return self.loop.create_task(wait_then_call())

    def cancel(self, token: Any) -> None:
        token.cancel()

    def run_until_idle(self, limit: int = 10_000) -> None:
        """``fakes.run_until_idle`` for an asyncio loop: one iteration at a time, as the running loop.

        asyncio's tasks need ``asyncio.get_running_loop()`` to answer, so the
        loop is registered as running for the duration, as ``run_forever`` does.
        """
        loop, selector = self.loop, self.selector  # type: ignore[attr-defined]
        step = getattr(loop, "run_once", None) or loop._run_once  # ours, or asyncio's name
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(loop)
        try:
            for _ in range(limit):
                if (not loop._ready and not selector.ready_events()
                        and all(timer.cancelled() for timer in loop._scheduled)):
                    break
                step()
            else:
                raise AssertionError(f"the loop was still busy after {limit} iterations")
        finally:
            asyncio.events._set_running_loop(previous)
        gc.collect()  # "Task exception was never retrieved" is reported at collection


class _VirtualClockSelectorLoop(asyncio.SelectorEventLoop):
    """asyncio's own selector loop, reading the time from an injected clock (see the module docstring)."""

    def __init__(self, selector: Any, clock: Callable[[], float]) -> None:
        self._virtual_clock = clock
        super().__init__(selector)

    def time(self) -> float:
        return self._virtual_clock()


class AsyncioReference(AsyncioTasks):
    """The reference row: the aio adapter on the standard library's loop."""

    stage = "aio"  # the adapter's; the loop is asyncio's own, below

    def make_stage_loop(self) -> Any:
        loop = _VirtualClockSelectorLoop(self.selector, self.clock)  # type: ignore[attr-defined]
        loop.set_exception_handler(
            lambda loop, context: self.errors.append(context["exception"]))  # type: ignore[attr-defined]
        return loop


# Stage name -> adapter: every stage with a ``loop`` in tinyloop/stages.py has
# one, except a loop that cannot take the fakes (``fakes=False``: tinyloop.uv).
ADAPTERS: dict[str, type[StageLoop]] = {
    adapter.stage: adapter for adapter in (Callbacks, Generators, YieldFrom, Coroutines, AsyncioTasks)
}
