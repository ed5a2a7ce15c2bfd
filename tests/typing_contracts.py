"""Each layer held to the contract it offers the next: read by mypy, never run.

tests/test_contracts.py runs ``mypy`` on this file alone (imports followed
silently: only this file's errors count).  Each function returns a loop as
the contract its layer promises, so a loop class that renamed or dropped a
name of its contract is a type error here, not an AttributeError in
production.  The C base of tinyloop.uv, which mypy cannot read, is held to
its contracts at run time by the same test file.
"""

from __future__ import annotations

from tinyloop.aio.unix_events import AioBase, SelectorEventLoop
from tinyloop.callbacks.loop import Loop, Reactor
from tinyloop.trace.instrument import Observable


def part_ii_offers_the_reactor(loop: Loop) -> Reactor:
    """Part II's loop, to Part III (a subclass) and Part IV (a C base in front of it)."""
    return loop


def part_iii_offers_its_base(loop: SelectorEventLoop) -> AioBase:
    """Part III's loop, to Part IV's C base (tinyloop/uv/_loop.pyx)."""
    return loop


def every_loop_is_observable(loop: Loop) -> Observable:
    """Part II's loop (and so every loop after it), to the hook sites that report to its instruments."""
    return loop
