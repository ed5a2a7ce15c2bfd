"""Recording loops that have no hooks, from outside: stdlib asyncio, uvloop,
and the readiness servers of Part I (ReadinessProbe, at the end).

Neither loop calls an instrument, so we stand where we can see it pass:

  what                      asyncio (a subclass + a wrapped selector)   uvloop (a subclass)
  run start and end         run_forever, overridden                     run_forever, overridden
  the I/O wait, timeout,    the selector's select(), wrapped            not seen: libuv polls in C
    ready events
  timers made due           the heap's shrinkage between the wait and   not seen
                            the first callback (cancelled ones count)
  each callback, its name   every callback wrapped when scheduled       call_soon/call_later/call_at and
                            (call_soon, call_at, _add_reader)           add_reader only: uvloop's own
                                                                        transports and servers call
                                                                        Python from C, unseen
  task spawn, steps, exit   from the step callbacks (instrument.py)     the same
  transport bytes, syscalls not seen (they would need the transport     not seen
                            classes patched)

Rules this file keeps:
  * Subclass and wrap; never copy a loop's code and never patch asyncio or
    uvloop themselves, so what is recorded is those loops as they are.
  * The wrapper is the only thing in a callback's path, and with no
    instrument it calls straight through.
"""

from __future__ import annotations

import asyncio
import importlib
import selectors
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tinyloop.trace import instrument as instruments
from tinyloop.trace.recorder import Recorder

__all__ = ["CANNOT_RECORD", "ReadinessProbe", "TracedAsyncioLoop", "policy", "traced_uvloop_class"]

# What each loop's trace lacks, for the timeline's caption and the book.
CANNOT_RECORD = {
    "asyncio": "transport reads and writes (bytes, system calls)",
    "uvloop": "the I/O wait, timers made due, the callbacks of uvloop's own transports and "
              "servers (libuv calls them from C), transport reads and writes",
}


class _Observed:
    """A callback, wrapped so the loop's instruments see it run.

    Hooks receive this object as the handle: its ``_callback`` is the
    original, so ``callback_name`` and the task detection of instrument.py
    read it as they read a real handle.
    """

    __slots__ = ("_callback", "_loop")

    def __init__(self, callback: Callable[..., object], loop: Any) -> None:
        self._callback = callback
        self._loop = loop

    def __call__(self, *args: Any) -> object:
        instrument = self._loop._instrument
        if instrument is None:
            return self._callback(*args)
        self._loop._callbacks_begin()
        instrument.before_callback(self)
        try:
            return self._callback(*args)
        finally:
            instrument.after_callback(self)

    def __repr__(self) -> str:
        return f"<observed {self._callback!r}>"


def _observed(callback: Callable[..., object], loop: Any) -> Callable[..., object]:
    return callback if isinstance(callback, _Observed) else _Observed(callback, loop)


class _Outside:
    """What both traced loops add: the instrument slot, run hooks, wrapped callbacks."""

    _instrument: instruments.InstrumentSet | None = None

    def add_instrument(self, instrument: Any) -> None:
        """As Part II's ``Loop.add_instrument``."""
        instruments.add_instrument(self, instrument)

    def remove_instrument(self, instrument: Any) -> bool:
        return instruments.remove_instrument(self, instrument)

    def _callbacks_begin(self) -> None:
        """The first callback of an iteration is about to run (asyncio: report the timers)."""

    def run_forever(self) -> None:
        if self._instrument is not None:
            self._instrument.before_run(self)
        try:
            super().run_forever()  # type: ignore[misc]
        finally:
            if self._instrument is not None:
                self._instrument.after_run(self)

    def call_soon(self, callback: Callable[..., object], *args: Any, context: Any = None) -> Any:
        return super().call_soon(_observed(callback, self), *args, context=context)  # type: ignore[misc]

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None) -> Any:
        return super().call_later(delay, _observed(callback, self), *args, context=context)  # type: ignore[misc]

    def call_at(self, when: float, callback: Callable[..., object], *args: Any, context: Any = None) -> Any:
        return super().call_at(when, _observed(callback, self), *args, context=context)  # type: ignore[misc]


class _TracedSelector(selectors.BaseSelector):
    """A selector that reports each ``select`` to its loop's instruments, then answers as the real one."""

    def __init__(self, inner: selectors.BaseSelector) -> None:
        self.inner = inner
        self.loop: TracedAsyncioLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        instrument = loop._instrument if loop is not None else None
        if instrument is None:
            return self.inner.select(timeout)
        loop._callbacks_begin()  # an iteration with no callback still reports its timers
        instrument.before_io_wait(timeout)
        events = self.inner.select(timeout)
        instrument.after_io_wait(len(events))
        loop._timers_before = len(loop._scheduled)
        return events

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self.inner.get_key(fileobj)

    def get_map(self) -> Any:
        return self.inner.get_map()

    def close(self) -> None:
        self.inner.close()


class TracedAsyncioLoop(_Outside, asyncio.SelectorEventLoop):  # type: ignore[misc]
    """stdlib asyncio's selector loop, recordable: ``add_instrument`` works as on our loops.

    The hooks it calls, and those it cannot, are in this module's header.
    """

    def __init__(self, selector: selectors.BaseSelector | None = None) -> None:
        traced = _TracedSelector(selector if selector is not None else selectors.DefaultSelector())
        self._timers_before: int | None = None
        super().__init__(traced)
        traced.loop = self

    def _callbacks_begin(self) -> None:
        before, self._timers_before = self._timers_before, None
        if before is not None and self._instrument is not None:
            # asyncio's _run_once has moved the due timers onto the ready queue
            # and popped the first handle (this one): count it back in.
            self._instrument.timers_due(max(0, before - len(self._scheduled)), len(self._ready) + 1)

    def _add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> Any:
        return super()._add_reader(fd, _observed(callback, self), *args)  # type: ignore[misc]

    def _add_writer(self, fd: Any, callback: Callable[..., object], *args: Any) -> Any:
        return super()._add_writer(fd, _observed(callback, self), *args)  # type: ignore[misc]


def traced_uvloop_class() -> type:
    """uvloop's Loop, recordable from outside (see this module's header).  Raises ImportError without uvloop."""
    # uvloop is optional (the dev extra): imported by name, only here.
    uvloop = importlib.import_module("uvloop")

    class TracedUvloop(_Outside, uvloop.Loop):  # type: ignore[misc, valid-type]
        def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> None:
            super().add_reader(fd, _observed(callback, self), *args)

        def add_writer(self, fd: Any, callback: Callable[..., object], *args: Any) -> None:
            super().add_writer(fd, _observed(callback, self), *args)

    return TracedUvloop


def policy(loop_name: str, recorder: Any) -> asyncio.AbstractEventLoopPolicy:
    """An event loop policy whose new loops are ``loop_name``'s ("asyncio", "uvloop"), with ``recorder`` on.

    Raises ImportError for uvloop when it is not installed, ValueError for
    another name.
    """
    if loop_name == "asyncio":
        factory: Callable[[], Any] = TracedAsyncioLoop
    elif loop_name == "uvloop":
        factory = traced_uvloop_class()
    else:
        raise ValueError(f"no outside recording for {loop_name!r}: use 'asyncio' or 'uvloop'")

    class Policy(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            loop = factory()
            loop.add_instrument(recorder)
            return loop

    return Policy()


class ReadinessProbe:
    """Records the waits of Part I's servers, which have no loop object, by wrapping select(2) and friends.

    Inside :meth:`installed`, ``select.select``, ``select.poll()`` and
    ``select.epoll()`` hand out wrappers that time each call and count what
    it returned: the loop track gets a ``wait`` span per call (timeout in
    seconds, events ready) and a ``handle events`` span for the work
    between two waits, and the ``ready descriptors`` counter.  What a
    server does inside that work (which socket, how many bytes) is not seen.
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._after: float | None = None   # when the last wait returned

    def wait(self, call: Callable[[], Any], timeout: float | None, count: Callable[[Any], int]) -> Any:
        recorder = self.recorder
        start = recorder.now()
        if self._after is not None:
            recorder.span("handle events", self._after, start)
        result = call()
        end = recorder.now()
        ready = count(result)
        recorder.span("wait", start, end, args={"timeout": timeout, "events": ready})
        recorder.counter("ready descriptors", end, events=ready)
        self._after = end
        return result

    @contextmanager
    def installed(self) -> Iterator[None]:
        """While the ``with`` block runs, ``select``'s three waits are the wrapped ones."""
        import select
        originals = {name: getattr(select, name) for name in ("select", "poll", "epoll") if hasattr(select, name)}
        probe = self

        def traced_select(rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
            return probe.wait(lambda: originals["select"](rlist, wlist, xlist, timeout), timeout,
                              lambda r: len(r[0]) + len(r[1]) + len(r[2]))

        class _Traced:
            def __init__(self, inner: Any, milliseconds: bool) -> None:
                self._inner, self._ms = inner, milliseconds

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

            def poll(self, timeout: Any = None, *args: Any) -> Any:
                seconds = None if timeout is None or timeout < 0 else timeout / 1000 if self._ms else timeout
                return probe.wait(lambda: self._inner.poll(timeout, *args), seconds, len)

            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: Any) -> None:
                self._inner.close()

        select.select = traced_select
        if "poll" in originals:
            select.poll = lambda: _Traced(originals["poll"](), True)  # type: ignore[assignment]
        if "epoll" in originals:
            select.epoll = lambda *a, **k: _Traced(originals["epoll"](*a, **k), False)  # type: ignore[assignment]
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(select, name, original)
