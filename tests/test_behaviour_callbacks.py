"""The shared Part II behaviour suite, run on the callbacks reactor (tinyloop.callbacks.loop)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from behaviour import LoopBehaviour
from fakes import run_until_idle

from tinyloop.callbacks.loop import Handle, Loop


class TestCallbacksBehaviour(LoopBehaviour):
    """The adapter: work is a plain callback; a token is its Handle (or the socket, for a reader)."""

    def make_loop(self) -> None:
        self.loop = Loop(selector=self.selector, clock=self.clock)
        self.loop.set_exception_handler(lambda loop, context: self.errors.append(context["exception"]))

    def close_loop(self) -> None:
        self.loop.close()

    def soon(self, fn: Callable[[], object]) -> Handle:
        return self.loop.call_soon(fn)

    def schedule(self, delay: float, fn: Callable[[], object]) -> Handle:
        return self.loop.call_later(delay, fn)

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        def once() -> None:
            self.loop.remove_reader(sock)
            fn()

        self.loop.add_reader(sock, once)
        return sock

    def cancel(self, token: Any) -> None:
        if isinstance(token, Handle):
            token.cancel()
        else:
            self.loop.remove_reader(token)

    def run_until_idle(self) -> None:
        run_until_idle(self.loop, self.selector)

    def now(self) -> float:
        return self.loop.time()
