# examples/_loops.py
#
# The one place the examples choose an event loop: ``--loop NAME`` maps to a
# loop factory, and ``run()`` runs the example's ``main()`` on a loop it
# makes, with asyncio.Runner (Python 3.11+), the way any program picks a loop.
#
# Rules this file keeps:
#   * The examples themselves are plain asyncio: they never name a loop.
#     Everything loop-specific is the LOOPS table below, so adding a loop is
#     adding one row.
#   * A loop is imported only when it is chosen: ``--loop asyncio`` runs on a
#     machine without uvloop or tinyloop installed.
#   * SIGINT (Ctrl-C) and SIGTERM stop an example the same way: its main task
#     is cancelled, its ``finally`` blocks run, and it exits with status 0.
#     A second signal stops it at once (KeyboardInterrupt).
#
# Discussion: asyncio.Runner turns Ctrl-C into a cancelled main task too,
# but only for SIGINT, and it ends with KeyboardInterrupt (a traceback from
# a server stopped on purpose).  Our handler is put in place before the
# Runner runs, so the Runner leaves SIGINT alone (it only replaces Python's
# default handler), and SIGTERM, what ``kill`` and service managers send,
# gets the same treatment.  The handler only asks the loop to cancel the
# task (call_soon_threadsafe wakes the loop through its self-pipe); it does
# no work inside the signal handler itself.

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Loop name -> "module:factory"; the factory makes a new, not running loop.
LOOPS = {
    "asyncio": "asyncio:new_event_loop",          # the standard library's selector loop
    "uvloop": "uvloop:new_event_loop",            # libuv, in Cython
    "aio": "tinyloop.aio:new_event_loop",         # Part III: this book's loop
    "uv": "tinyloop.uv:new_event_loop",           # Part IV: Part III's loop, hot paths on libuv
    "ring": "tinyloop.ring:new_event_loop",       # Part VI: Part III's loop as a proactor on io_uring
}
DEFAULT_LOOP = "aio"


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The factory of the loop called ``name`` (a key of LOOPS).

    Raises KeyError for an unknown name and ImportError when the loop's
    package is not installed.
    """
    module, _, function = LOOPS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def make_parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by ``doc``'s first line, with the ``--loop`` option."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--loop", choices=list(LOOPS), default=DEFAULT_LOOP,
                        help=f"event loop to run on (default: {DEFAULT_LOOP})")
    return parser


def add_address_options(parser: argparse.ArgumentParser, port: int, *, serving: bool = True) -> None:
    """Give ``parser`` ``--host`` and ``--port`` (default 127.0.0.1 and ``port``)."""
    where = "address to listen on" if serving else "server address"
    parser.add_argument("--host", default="127.0.0.1", help=f"{where} (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=port,
                        help=f"port{' to listen on, 0 for any' if serving else ''} (default: {port})")


def describe(loop: asyncio.AbstractEventLoop) -> str:
    """The running loop's class, as a reader checks which loop runs: ``module.Class``."""
    return f"{type(loop).__module__}.{type(loop).__qualname__}"


def run(main: Callable[[], Coroutine[Any, Any, T]], loop_name: str) -> T | None:
    """Run ``main()`` on a new loop of the kind ``loop_name``; None if a signal stopped it.

    Returns what ``main()`` returns.  Raises what it raises, and
    KeyboardInterrupt on a second SIGINT/SIGTERM while the first is still
    unwinding the task.
    """
    async def stoppable() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        signalled: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            if signalled:
                raise KeyboardInterrupt  # the second signal: stop now
            signalled.append(signum)
            loop.call_soon_threadsafe(task.cancel)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return await main()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
        try:
            return runner.run(stoppable())
        except asyncio.CancelledError:
            print("stopped", file=sys.stderr, flush=True)
            return None
