"""asyncio's Future is used as it is (see base_events.py), so this module,
which CPython's Lib/asyncio/futures.py names, holds only the one helper
CPython keeps beside its Future and every layer of the loop calls: the
loop, the transports and the subprocess transport all wake a waiter with
it.  Being below all of them, it is imported by each and imports none.
"""

from __future__ import annotations

import asyncio

__all__: list[str] = []


def _set_result_unless_cancelled(future: asyncio.Future, result: object) -> None:
    """Set ``future``'s result, unless its owner cancelled it meanwhile.

    A waiter's owner may give up (a timeout, a cancelled task) between the
    moment we schedule the result and the moment it is set; setting the
    result of a cancelled future would raise InvalidStateError.
    """
    if not future.cancelled():
        future.set_result(result)
