"""A virtual clock and a scripted selector: a loop's time and readiness under a test's control.

Every Part II loop takes its clock and its selector as arguments.  Given
these two, a test decides when a descriptor is ready and what time it is, and
the loop runs the same interleaving on every run, on any machine:

    clock = VirtualClock()
    selector = FakeSelector(clock)
    loop = Loop(selector=selector, clock=clock)
    selector.set_ready(sock, EVENT_READ)   # the next select() reports sock readable
    loop.run_once()

``FakeSelector.select(timeout)`` never sleeps.  If something is ready it
reports it at once; otherwise it moves the clock forward by ``timeout`` (the
loop wanted to sleep until its next timer: that time has now passed) and
reports nothing.  A select with no timeout and nothing ready would block
forever in a real loop, so here it raises :class:`WouldBlockForever`.

Readiness is level-triggered like select(2), poll(2) and default epoll(7): a
descriptor set ready stays ready until ``clear_ready`` (or, with
``once=True``, until one select has reported it).
"""

from __future__ import annotations

import selectors
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tinyloop.callbacks import loop as loop_module

__all__ = ["FakeSelector", "VirtualClock", "WouldBlockForever", "run_until_idle"]

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class VirtualClock:
    """A clock that moves only when told to: call it for the time, ``advance`` to move it."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (>= 0; clocks never go back)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        self.now += seconds


class WouldBlockForever(AssertionError):
    """select() was asked to wait with no timeout and nothing will ever be ready."""


class FakeSelector(selectors.BaseSelector):
    """A :class:`selectors.BaseSelector` whose readiness a test scripts.

    Registration works as in the real selectors (KeyError for a descriptor
    registered twice or not at all, ValueError for a bad event mask).
    ``timeouts`` records every timeout the loop passed to ``select``, so a test
    can check how long the loop meant to wait.
    """

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._keys: dict[int, selectors.SelectorKey] = {}
        self._ready: dict[int, tuple[int, bool]] = {}  # fd -> (events, once)
        self.timeouts: list[float | None] = []
        self.closed = False

    # -- the test's side ------------------------------------------------------

    def set_ready(self, fileobj: Any, events: int = READ, *, once: bool = False) -> None:
        """Make ``fileobj`` ready for ``events`` (EVENT_READ and/or EVENT_WRITE)."""
        fd = self._fd(fileobj)
        old = self._ready.get(fd, (0, once))[0]
        self._ready[fd] = (old | events, once)

    def clear_ready(self, fileobj: Any, events: int = READ | WRITE) -> None:
        """Make ``fileobj`` no longer ready for ``events``."""
        fd = self._fd(fileobj)
        old, once = self._ready.pop(fd, (0, False))
        if old & ~events:
            self._ready[fd] = (old & ~events, once)

    def ready_events(self) -> list[tuple[selectors.SelectorKey, int]]:
        """What a select() would report now: registered descriptors with wanted, ready events."""
        events = []
        for fd, (ready, _) in self._ready.items():
            key = self._keys.get(fd)
            if key is not None and key.events & ready:
                events.append((key, key.events & ready))
        return events

    def is_registered(self, fileobj: Any, events: int = READ | WRITE) -> bool:
        """True if ``fileobj`` is registered for any of ``events``."""
        try:
            key = self._keys.get(self._fd(fileobj))
        except ValueError:  # closed, and not registered
            return False
        return key is not None and bool(key.events & events)

    # -- the loop's side ------------------------------------------------------

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.timeouts.append(timeout)
        events = self.ready_events()
        for key, _ in events:
            if self._ready[key.fd][1]:
                del self._ready[key.fd]
        if events:
            return events
        if timeout is None:
            raise WouldBlockForever("select() with no timeout and nothing ready: "
                                    "a real loop would block forever here")
        self.clock.advance(max(0.0, timeout))
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        if not events or events & ~(READ | WRITE):
            raise ValueError(f"invalid events: {events!r}")
        fd = self._fd(fileobj)
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} (fd {fd}) is already registered")
        key = self._keys[fd] = selectors.SelectorKey(fileobj, fd, events, data)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = self._fd(fileobj)
        try:
            return self._keys.pop(fd)
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        if not events or events & ~(READ | WRITE):
            raise ValueError(f"invalid events: {events!r}")
        fd = self._fd(fileobj)
        if fd not in self._keys:
            raise KeyError(f"{fileobj!r} is not registered")
        key = self._keys[fd] = selectors.SelectorKey(self._keys[fd].fileobj, fd, events, data)
        return key

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        try:
            return self._keys[self._fd(fileobj)]
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None

    def get_map(self) -> Mapping[int, selectors.SelectorKey]:
        return MappingProxyType(self._keys)

    def close(self) -> None:
        self._keys.clear()
        self._ready.clear()
        self.closed = True

    def _fd(self, fileobj: Any) -> int:
        if isinstance(fileobj, int):
            fd = fileobj
        else:
            fd = fileobj.fileno()
            if fd < 0:  # a closed socket: find it by identity, as selectors does
                for key in self._keys.values():
                    if key.fileobj is fileobj:
                        return key.fd
        if fd < 0:
            raise ValueError(f"invalid file descriptor: {fileobj!r}")
        return fd


def run_until_idle(loop: Any, selector: FakeSelector, limit: int = 10_000) -> int:
    """Run ``loop.run_once()`` until nothing is left to do; return how many iterations ran.

    Idle means: the ready queue is empty, no live timer is left in the heap,
    and the selector has nothing to report.  While it runs, the loop is this
    thread's running loop, as under ``run_forever`` (so ``get_running_loop()``
    works in callbacks and tasks).  Raises AssertionError after ``limit``
    iterations (a callback that reschedules itself forever).
    """
    previous = getattr(loop_module._running, "loop", None)
    loop_module._running.loop = loop
    try:
        for iteration in range(limit):
            if (not loop._ready and not selector.ready_events()
                    and all(timer.cancelled() for timer in loop._scheduled)):
                return iteration
            loop.run_once()
    finally:
        loop_module._running.loop = previous
    raise AssertionError(f"the loop was still busy after {limit} iterations")
