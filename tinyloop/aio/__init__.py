"""Part III: an asyncio event loop, written on Part II's reactor, that asyncio programs run on unchanged.

Use it the way uvloop is used::

    import tinyloop.aio
    tinyloop.aio.run(main())                               # like asyncio.run / uvloop.run
    asyncio.Runner(loop_factory=tinyloop.aio.new_event_loop)
    asyncio.set_event_loop_policy(tinyloop.aio.EventLoopPolicy())

The modules mirror CPython's ``Lib/asyncio/`` file for file: ``events``,
``base_events``, ``selector_events``, ``unix_events``, ``base_subprocess``, ``transports``,
``sslproto``, ``runners``.

Discussion: the names above are looked up on first use (PEP 562's module
``__getattr__``), not imported here.  A package that imported its modules
eagerly would load every reference module the moment any one of them is
imported, and the exercise checker could no longer put a student's module in
its place first (see tinyloop/_override.py).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EventLoopPolicy", "Loop", "new_event_loop", "run"]

_WHERE = {
    "EventLoopPolicy": "tinyloop.aio.unix_events",
    "Loop": "tinyloop.aio.unix_events",
    "new_event_loop": "tinyloop.aio.unix_events",
    "run": "tinyloop.aio.runners",
}


def __getattr__(name: str) -> Any:
    try:
        module = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module 'tinyloop.aio' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
