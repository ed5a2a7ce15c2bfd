"""The shared Part II behaviour suite, run on the coroutines stage (our Future and Task).

The adapter turns each piece of work into a Task: ``soon(fn)`` a task that
calls ``fn``; ``schedule(delay, fn)`` a task that awaits ``sleep(delay)``
first; ``wait_readable(sock, fn)`` a task that awaits the socket's
readiness.  A token is the Task, and ``cancel`` is ``Task.cancel()``, which
must reach the future the task awaits (the sleep's timer, the socket's reader).
"""

from __future__ import annotations

import gc
import socket
from collections.abc import Callable

from behaviour import LoopBehaviour
from fakes import run_until_idle

from tinyloop.callbacks.loop import Loop
from tinyloop.coroutines.streams import wait_readable
from tinyloop.coroutines.tasks import Task, sleep


class TestCoroutinesBehaviour(LoopBehaviour):

    def make_loop(self) -> None:
        self.loop = Loop(selector=self.selector, clock=self.clock)
        self.loop.set_exception_handler(lambda loop, context: self.errors.append(context["exception"]))

    def close_loop(self) -> None:
        self.loop.close()

    def soon(self, fn: Callable[[], object]) -> Task:
        async def call() -> None:
            fn()

        return Task(call(), loop=self.loop)

    def schedule(self, delay: float, fn: Callable[[], object]) -> Task:
        async def sleep_then_call() -> None:
            await sleep(delay)
            fn()

        return Task(sleep_then_call(), loop=self.loop)

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Task:
        async def wait_then_call() -> None:
            await wait_readable(sock)
            fn()

        return Task(wait_then_call(), loop=self.loop)

    def cancel(self, token: Task) -> None:
        token.cancel()

    def run_until_idle(self) -> None:
        run_until_idle(self.loop, self.selector)
        # A failed task nobody awaits reports its exception when it is
        # collected ("Task exception was never retrieved"); the exception's
        # traceback refers to the task's frame, a cycle only gc.collect frees.
        gc.collect()

    def now(self) -> float:
        return self.loop.time()
