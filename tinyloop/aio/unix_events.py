# tinyloop/aio/unix_events.py
#
# The loop as programs get it: the selector loop plus what only Unix has.
# It reads beside CPython's Lib/asyncio/unix_events.py, whose
# _UnixSelectorEventLoop is our SelectorEventLoop.
#
# Rules this file keeps:
#   * This is the last class in the chain, and the one users make:
#
#         tinyloop.callbacks.loop.Loop            Part II: the reactor
#           -> base_events.BaseEventLoop          asyncio's contract, no I/O
#             -> selector_events.BaseSelectorEventLoop   sockets, transports
#               -> unix_events.SelectorEventLoop         signals, pipes,
#                                                        subprocesses, Unix sockets
#
#   * ``Loop`` and ``new_event_loop`` are the public names (tinyloop.aio
#     exports them), as uvloop's are.

from __future__ import annotations

from typing import Any

from tinyloop.aio import selector_events

__all__ = ["Loop", "SelectorEventLoop", "new_event_loop"]


class SelectorEventLoop(selector_events.BaseSelectorEventLoop):
    """tinyloop's asyncio event loop for Unix (Linux, macOS, the BSDs).

    ``selector`` (a :class:`selectors.BaseSelector`, default the best the
    platform has) and ``clock`` (seconds, monotonic) are injected as in
    Part II; ``debug=None`` reads the environment.
    """


Loop = SelectorEventLoop


def new_event_loop(**kwargs: Any) -> Loop:
    """A new, not running, :class:`Loop`; keyword arguments go to its constructor.

    Pass it where asyncio takes a loop factory:
    ``asyncio.Runner(loop_factory=tinyloop.aio.new_event_loop)``, or
    ``asyncio.run(main(), loop_factory=...)`` on 3.12+.
    """
    return Loop(**kwargs)
