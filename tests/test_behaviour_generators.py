"""The shared Part II behaviour suite, run on both generator schedulers.

The unit of work is a task: ``soon(fn)`` spawns a task that calls ``fn()``,
``schedule(delay, fn)`` one that sleeps first, ``wait_readable(sock, fn)`` one
that waits in ``read_wait`` first; the token is the Task, and ``cancel`` is
``Scheduler.cancel``.  The stack scheduler's tasks call traps with ``yield``,
the yield-from scheduler's with ``yield from``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from behaviour import LoopBehaviour
from fakes import run_until_idle

from tinyloop.callbacks.loop import Loop
from tinyloop.generators.scheduler import Scheduler, Task
from tinyloop.generators.traps import read_wait, sleep
from tinyloop.generators.yieldfrom import YieldFromScheduler


class TestGeneratorsBehaviour(LoopBehaviour):
    scheduler_class: type[Scheduler] = Scheduler

    def make_loop(self) -> None:
        self.loop = Loop(selector=self.selector, clock=self.clock)
        # A scheduler bug that escapes into the reactor is an error too.
        self.loop.set_exception_handler(lambda loop, context: self.errors.append(context["exception"]))
        self.scheduler = self.scheduler_class(self.loop, on_error=lambda task, error: self.errors.append(error))

    def close_loop(self) -> None:
        self.scheduler.close()
        self.loop.close()

    def soon(self, fn: Callable[[], object]) -> Task:
        def body():
            fn()
            return
            yield  # pragma: no cover  (a generator that never waits)

        return self.scheduler.spawn(body())

    def schedule(self, delay: float, fn: Callable[[], object]) -> Task:
        def body():
            yield sleep(delay)
            fn()

        return self.scheduler.spawn(body())

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Task:
        def body():
            yield read_wait(sock)
            fn()

        return self.scheduler.spawn(body())

    def cancel(self, token: Task) -> None:
        self.scheduler.cancel(token)

    def run_until_idle(self) -> None:
        run_until_idle(self.loop, self.selector)

    def now(self) -> float:
        return self.loop.time()


class TestYieldFromBehaviour(TestGeneratorsBehaviour):
    scheduler_class = YieldFromScheduler

    def schedule(self, delay: float, fn: Callable[[], object]) -> Task:
        def body():
            yield from sleep(delay)
            fn()

        return self.scheduler.spawn(body())

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Task:
        def body():
            yield from read_wait(sock)
            fn()

        return self.scheduler.spawn(body())
