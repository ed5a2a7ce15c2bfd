"""``run(main())``: make a loop, run a coroutine on it, tidy up, close.
CPython's Lib/asyncio/runners.py has the class that does this,
asyncio.Runner (3.11+), and it works on any loop that keeps the contract.
So we write no runner of our own: ``run`` is asyncio's Runner with our
loop factory, as uvloop.run is.  What the Runner does, in order:

    1. loop = new_event_loop(); loop.set_debug(debug) if debug is not None
    2. run main() as a task; on Ctrl-C (SIGINT in the main thread) cancel
       that task, and raise KeyboardInterrupt once it has unwound
    3. cancel every task still pending, and wait for them
    4. loop.shutdown_asyncgens(), loop.shutdown_default_executor()
    5. loop.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from tinyloop.aio.unix_events import new_event_loop

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Run the coroutine ``main`` on a new tinyloop loop and return its result.

    ``debug`` turns the loop's debug mode on or off (None: the environment
    decides, see tinyloop.aio.events.debug_from_environment).  Raises what
    ``main`` raises; KeyboardInterrupt after Ctrl-C has cancelled ``main``;
    RuntimeError if called while a loop is running in this thread.  Source:
    the asyncio docs, "Runners".
    """
    with asyncio.Runner(loop_factory=new_event_loop, debug=debug) as runner:
        return runner.run(main)
