"""The reactor: one thread, one selector, and three places where work waits.

    ready queue   callbacks to run in the next iteration (call_soon)
    timer heap    callbacks to run at a time on the loop's clock (call_at)
    selector      callbacks to run when a file descriptor is ready (add_reader)

Every iteration of the loop (``run_once``) moves work from the heap and the
selector onto the ready queue, then runs the queue.  Nothing else in this
file calls a callback: whatever a program does on this loop, it does inside
one of those runs.

Rules this file keeps:
  * The clock and the selector are injected.  The loop reads time only
    through ``self._clock`` and waits only in ``self._selector.select``, so a
    test gives it a virtual clock and a scripted selector and gets the same
    interleaving on every run (tests/fakes.py).
  * One iteration runs exactly the callbacks that were ready when it began
    its step 4.  A callback scheduled meanwhile waits for the next
    iteration, so a callback that reschedules itself cannot starve timers
    and I/O: the loop polls the selector between any two of its runs.
  * Cancelling is marking.  A cancelled handle stays where it is (in the
    ready queue, in the heap) and is dropped when the loop reaches it; the
    heap is rebuilt only when cancelled timers make up most of it.
  * A callback's exception never stops the loop.  It goes to the exception
    handler with its context, and the next callback runs.  Only
    KeyboardInterrupt and SystemExit pass through, out of run_forever.
  * Only ``call_soon_threadsafe`` may be called from another thread.
  * Instruments watch, at no cost when absent (tinyloop/trace/instrument.py):
    each hook site is one test of ``self._instrument``, which is None unless
    ``add_instrument`` was called, and they sit in the steps' helpers, so
    ``run_once`` reads the same with or without them.

The names mirror asyncio's (``call_soon``, ``call_at``, ``add_reader``,
``_run_once`` there, ``run_once`` here), so this file can be read beside
CPython's Lib/asyncio/base_events.py and selector_events.py.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import selectors
import socket
import threading
import time
import types
from collections import deque
from collections.abc import Callable
from selectors import EVENT_READ, EVENT_WRITE
from typing import Any, Protocol, runtime_checkable

from tinyloop.trace import instrument as instruments

__all__ = ["DEBUG_ENV", "Handle", "Loop", "Reactor", "TimerHandle", "get_running_loop"]

logger = logging.getLogger("tinyloop")

# The longest we block in one select call, in seconds.  Discussion: epoll_wait
# takes its timeout in milliseconds as a C int (about 24 days); a timer further
# away than that would overflow it.  Waking once a day to recompute costs nothing.
MAXIMUM_SELECT_TIMEOUT = 24 * 3600

# Set to a non-empty string, this turns on debug mode in every Loop that is
# not told otherwise (see Loop), as PYTHONASYNCIODEBUG does for asyncio.
DEBUG_ENV = "TINYLOOP_DEBUG"

# The monotonic clock's tick, in seconds (1e-9 on Linux); see _move_due_timers.
CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution

# Rebuild the timer heap when more than this many of its entries are
# cancelled *and* they are more than half of it (see _clean_timer_heap).
_MIN_CANCELLED_TIMERS = 100
_CANCELLED_TIMERS_FRACTION = 0.5

# Which loop is running in this thread, if any (see get_running_loop).
_running = threading.local()


def _forget_running_loop_after_fork() -> None:
    # Discussion: a child made by fork(2) while a loop runs (multiprocessing's
    # "fork" start method, from a callback) is a copy of one thread, with
    # that loop still marked running in this thread-local.  The child never
    # runs the parent's loop, and must be free to run one of its own: clear
    # the slot there, as asyncio clears its own (Lib/asyncio/events.py).
    _running.loop = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_running_loop_after_fork)


def get_running_loop() -> Loop:
    """The loop whose ``run_forever`` is running in this thread.

    Raises RuntimeError when none is: code that needs "the loop" (a Future
    made without one, ``sleep``) can only run inside a callback.  Same rule as
    ``asyncio.get_running_loop``.
    """
    loop = getattr(_running, "loop", None)
    if loop is None:
        raise RuntimeError("no running event loop")
    return loop


class Handle:
    """A callback with its arguments, waiting in the ready queue or the selector.

    Returned by :meth:`Loop.call_soon` and :meth:`Loop.add_reader` (inside the
    registration).  ``cancel()`` stops it from running if it has not run yet;
    it is then dropped when the loop reaches it.
    """

    __slots__ = ("_callback", "_args", "_cancelled", "_loop", "_repr")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: Loop) -> None:
        self._callback: Callable[..., object] | None = callback
        self._args: tuple[Any, ...] | None = args
        self._cancelled = False
        self._loop = loop
        self._repr: str | None = None

    def cancel(self) -> None:
        """Mark the handle so the loop skips it; idempotent, and harmless after it ran."""
        if not self._cancelled:
            if self._loop._debug:
                self._repr = repr(self)  # keep the name for log lines
            self._cancelled = True
            # Drop the references now: a cancelled handle can sit in the heap
            # for a long time, and should not keep its arguments alive there.
            self._callback = None
            self._args = None

    def cancelled(self) -> bool:
        return self._cancelled

    def _run(self) -> None:
        """Call the callback; report any exception through the loop and return."""
        try:
            self._callback(*self._args)  # type: ignore[misc]
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(exc)
        # The error may outlive this call (a future keeps it), and its
        # traceback holds this frame: let go of the handle, whose arguments
        # may be that future, or only the cyclic GC frees the two.
        self = None  # type: ignore[assignment]

    def _report(self, exc: BaseException) -> None:
        self._loop.call_exception_handler({
            "message": f"Exception in callback {self._format_callback()}",
            "exception": exc,
            "handle": self,
        })

    def _format_callback(self) -> str:
        callback = self._callback
        name = getattr(callback, "__qualname__", None) or repr(callback)
        if isinstance(callback, types.MethodType):
            # A bound method: say whose, e.g. which task a Task._step belongs to.
            name = f"{callback.__self__!r}.{callback.__name__}"
        args = ", ".join(repr(arg) for arg in self._args or ())
        return f"{name}({args})"

    def __repr__(self) -> str:
        if self._cancelled:
            return self._repr or f"<{type(self).__name__} cancelled>"
        return f"<{type(self).__name__} {self._format_callback()}>"


class TimerHandle(Handle):
    """A handle in the timer heap, due at ``when`` (seconds on :meth:`Loop.time`).

    Handles order by ``when``, then by the order they were scheduled in, so
    timers due at the same time run first-scheduled, first-run.
    """

    __slots__ = ("_when", "_sequence", "_in_heap")

    def __init__(self, when: float, sequence: int, callback: Callable[..., object],
                 args: tuple[Any, ...], loop: Loop) -> None:
        super().__init__(callback, args, loop)
        self._when = when
        self._sequence = sequence
        self._in_heap = False

    def when(self) -> float:
        """The deadline, in seconds on :meth:`Loop.time`'s clock (as ``asyncio.TimerHandle.when()``)."""
        return self._when

    def __lt__(self, other: TimerHandle) -> bool:
        return (self._when, self._sequence) < (other._when, other._sequence)

    def cancel(self) -> None:
        if not self._cancelled and self._in_heap:
            self._loop._timer_cancelled()
        super().cancel()

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f" when={self._when:.6f}>"


@runtime_checkable
class Reactor(instruments.Observable, Protocol):
    """What Part II's loop offers the layers built on it, by name.

    tinyloop.aio subclasses :class:`Loop` and overrides one step of the
    iteration; tinyloop.uv and tinyloop.ring put a C base class in front of
    it, whose ``cdef public`` fields (tinyloop/uv/_loop.pxd,
    tinyloop/ring/fast.pyx) are the state below, so that ``Loop.__init__``
    fills them.  Those layers touch the reactor
    through these names and no others; the type checker holds
    :class:`Loop` to them (tests/test_contracts.py), so renaming one here
    fails there, not at run time.
    """

    # The state (see Loop.__init__):
    _ready: deque[Any]               # the ready queue
    _stopping: bool                  # stop() was called
    _closed: bool
    _debug: bool
    _selector: selectors.BaseSelector  # injected: where step 2 waits
    _clock: Callable[[], float]        # injected: what time() reads
    _scheduled: list[TimerHandle]      # the timer heap (heapq order; cancelled ones dropped lazily)
    _ssock: socket.socket | None     # the self-pipe's read end (None before __init__ makes it)
    _csock: socket.socket | None     # ... its write end: call_soon_threadsafe's and signals' wake-up

    # The four steps of run_once, each overridable alone:
    def _compute_timeout(self) -> float | None: ...
    def _process_events(self, events: list[tuple[selectors.SelectorKey, int]]) -> None: ...
    def _move_due_timers(self) -> None: ...
    def _run_ready(self) -> None: ...

    # What a step, or a faster copy of a public method, calls back:
    def _run_handle(self, handle: Handle) -> None: ...
    def _clean_timer_heap(self) -> None: ...
    def _check_closed(self) -> None: ...
    def _check_callback(self, callback: object, method: str) -> None: ...
    def _check_thread(self) -> None: ...


class Loop:
    """A reactor: run callbacks soon, at a time, or when a file descriptor is ready.

    ``selector`` is any :class:`selectors.BaseSelector` (default
    :class:`selectors.DefaultSelector`: epoll on Linux, kqueue on BSD and
    macOS); the loop closes it in :meth:`close`.  ``clock`` returns seconds as
    a float and never goes backwards (default :func:`time.monotonic`).  With
    ``debug=True`` a callback that runs longer than ``slow_callback_duration``
    seconds is logged by name, and ``call_soon`` refuses to be called from a
    thread other than the loop's.  ``debug=None`` (the default) reads the
    environment: debug mode is on when ``TINYLOOP_DEBUG`` is set to anything
    but an empty string, as ``PYTHONASYNCIODEBUG`` does for asyncio, so a
    server started by ``python -m tinyloop serve`` can name its slow callbacks.
    """

    # What add_reader/add_writer wrap a callback in, and where errors and slow
    # callbacks are logged.  A subclass that runs callbacks differently swaps
    # them (tinyloop.aio runs each callback in a contextvars.Context, and logs
    # on the "asyncio" logger that asyncio programs configure).
    handle_class = Handle
    _logger = logger
    # The self-pipe, made by __init__ (see _make_self_pipe); None until then,
    # for code that may meet a loop half made (tinyloop.uv's at-fork hook).
    _ssock: socket.socket | None = None
    _csock: socket.socket | None = None

    def __init__(self, selector: selectors.BaseSelector | None = None,
                 clock: Callable[[], float] = time.monotonic, *, debug: bool | None = None,
                 slow_callback_duration: float = 0.1) -> None:
        self._selector = selector if selector is not None else selectors.DefaultSelector()
        self._clock = clock
        self._debug = bool(os.environ.get(DEBUG_ENV)) if debug is None else debug
        self.slow_callback_duration = slow_callback_duration
        # The loop's state, all of it:
        self._ready: deque[Handle] = deque()     # ready queue: run in the next iteration
        self._scheduled: list[TimerHandle] = []  # timer heap: nearest deadline first
        self._cancelled_timers = 0               # cancelled handles still in the heap
        self._sequence = itertools.count()       # ties in the heap: first scheduled first
        self._stopping = False                   # stop() was called: end after this iteration
        self._thread_id: int | None = None       # the thread in run_forever, or None
        self._closed = False
        self._exception_handler: Callable[[Loop, dict[str, Any]], object] | None = None
        self._instrument: instruments.InstrumentSet | None = None  # hooks to call, or None
        self._make_self_pipe()
        if instruments.FOR_NEW_LOOPS:  # `python -m tinyloop trace` records a loop it did not make
            instruments.install_for_new_loop(self)

    # -- Scheduling ------------------------------------------------------------

    def time(self) -> float:
        """The loop's clock, in seconds: the time ``call_at`` deadlines are on."""
        return self._clock()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Handle:
        """Run ``callback(*args)`` in the next iteration, after those already queued.

        Returns a :class:`Handle`.  Raises RuntimeError if the loop is closed
        (or, in debug mode, if called from another thread: use
        :meth:`call_soon_threadsafe`), TypeError if ``callback`` is not callable.
        """
        self._check_callback(callback, "call_soon")
        if self._debug:
            self._check_thread()
        handle = Handle(callback, args, self)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` once ``delay`` seconds have passed; see :meth:`call_at`."""
        return self.call_at(self.time() + delay, callback, *args)

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` in the first iteration at or after time ``when``.

        ``when`` is in seconds on :meth:`time`'s clock; a time in the past
        means the next iteration.  Returns a :class:`TimerHandle`.  Raises as
        :meth:`call_soon` does.
        """
        self._check_callback(callback, "call_at")
        if self._debug:
            self._check_thread()
        # exercise timer-heap: begin
        timer = TimerHandle(when, next(self._sequence), callback, args, self)
        heapq.heappush(self._scheduled, timer)
        timer._in_heap = True
        return timer
        # exercise timer-heap: end

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> Handle:
        """Like :meth:`call_soon`, from any thread: also wakes the loop if it is waiting.

        Discussion: appending to a deque is atomic in CPython, so the handle is
        safely queued; but the loop may be blocked in select() with no timeout
        and would not look at the queue until some socket became ready.  The
        byte written to the self-pipe is that socket.
        """
        self._check_callback(callback, "call_soon_threadsafe")
        handle = Handle(callback, args, self)
        self._ready.append(handle)
        self._write_to_self()
        return handle

    def _timer_cancelled(self) -> None:
        """A TimerHandle in the heap was just cancelled: count it for the clean-up."""
        self._cancelled_timers += 1

    # -- Readiness ---------------------------------------------------------------
    #
    # Discussion: the selector holds one registration per file descriptor, with
    # an event mask and a data slot.  We keep ``(reader, writer)`` handles in
    # the data slot, so one select result leads straight to the callbacks, and
    # adding or removing interest is a ``modify`` of the mask (one epoll_ctl).

    def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> Handle:
        """Call ``callback(*args)`` in every iteration in which ``fd`` is readable.

        ``fd`` is an int or an object with ``fileno()`` (a socket).  Replaces
        any reader already set for ``fd``.  Readiness is level-triggered: the
        callback runs again next iteration while data is left unread.  Call
        :meth:`remove_reader` before closing ``fd``: the kernel reuses the
        number for the next descriptor it opens.
        """
        return self._add_interest(fd, selectors.EVENT_READ, callback, args)

    def add_writer(self, fd: Any, callback: Callable[..., object], *args: Any) -> Handle:
        """Call ``callback(*args)`` in every iteration in which ``fd`` is writable.

        A connected socket is almost always writable, so ask only while there
        is something to send, or the loop never sleeps.
        """
        return self._add_interest(fd, selectors.EVENT_WRITE, callback, args)

    def remove_reader(self, fd: Any) -> bool:
        """Stop watching ``fd`` for reading; True if a reader was set."""
        return self._remove_interest(fd, selectors.EVENT_READ)

    def remove_writer(self, fd: Any) -> bool:
        """Stop watching ``fd`` for writing; True if a writer was set."""
        return self._remove_interest(fd, selectors.EVENT_WRITE)

    def _add_interest(self, fd: Any, event: int, callback: Callable[..., object],
                      args: tuple[Any, ...]) -> Handle:
        name = "add_reader" if event == selectors.EVENT_READ else "add_writer"
        self._check_callback(callback, name)
        handle = self.handle_class(callback, args, self)
        reading = event == selectors.EVENT_READ
        try:
            # Discussion: register first, and look up only when that fails.
            # A get_key() miss raises a KeyError whose message formats the
            # socket's repr (two system calls), and a fresh registration is
            # the common case: a coroutine waiting for readiness adds and
            # removes its reader around every wait.
            self._selector.register(fd, event, (handle, None) if reading else (None, handle))
            return handle
        except KeyError:  # registered already: add this event to its mask
            key = self._selector.get_key(fd)
        reader, writer = key.data
        old, data = (reader, (handle, writer)) if reading else (writer, (reader, handle))
        self._selector.modify(fd, key.events | event, data)
        if old is not None:
            old.cancel()
        return handle

    def _remove_interest(self, fd: Any, event: int) -> bool:
        if self._closed:
            return False
        try:
            key = self._selector.get_key(fd)
        except (KeyError, ValueError):  # ValueError: a closed socket that was not registered
            return False
        reader, writer = key.data
        if event == selectors.EVENT_READ:
            old, data = reader, (None, writer)
        else:
            old, data = writer, (reader, None)
        mask = key.events & ~event
        if mask:
            self._selector.modify(fd, mask, data)
        else:
            self._selector.unregister(fd)  # no interest left: leave the interest list
        if old is None:
            return False
        old.cancel()
        return True

    # -- The iteration -------------------------------------------------------------

    def run_once(self) -> None:
        """One iteration of the loop: the only place where callbacks are called.

        Four steps: (1) work out how long we may wait, (2) wait for readiness
        that long, (3) put the callbacks of ready file descriptors and due
        timers on the ready queue, (4) run what is on the ready queue now
        (:meth:`_run_ready`, the one step a later loop runs its own way).
        """
        # exercise run-once: begin
        # 1. Compute the timeout: zero if work is ready, else until the nearest timer.
        timeout = self._compute_timeout()

        # 2. Wait for readiness: the only place the loop blocks.
        events = self._selector.select(timeout)

        # 3. Turn events into ready callbacks, then move due timers after them.
        self._process_events(events)
        self._move_due_timers()

        # 4. Run the callbacks that are ready now, and only those.
        self._run_ready()
        # exercise run-once: end

    def _run_ready(self) -> None:
        """Step 4: run exactly the handles that are on the ready queue now.

        Callbacks they schedule land behind them and wait for the next
        iteration.  A subclass that runs handles differently overrides this
        method alone (tinyloop.aio's runs them as asyncio's ``_run_once`` does).
        """
        # exercise run-once: begin
        for _ in range(len(self._ready)):
            handle = self._ready.popleft()
            if not handle._cancelled:
                self._run_handle(handle)
        # exercise run-once: end
        handle = None  # type: ignore[assignment]  # see _run_handle

    def _compute_timeout(self) -> float | None:
        """Seconds the selector may block: 0, until the nearest timer, or None (forever).

        Its caller waits next, so this is where instruments hear ``before_io_wait``.
        """
        if self._scheduled:  # (an empty heap has nothing to clean: spare the call)
            self._clean_timer_heap()
        if self._ready or self._stopping:
            timeout: float | None = 0
        elif not self._scheduled:
            timeout = None
        else:
            delay = self._scheduled[0]._when - self.time()
            timeout = min(max(0.0, delay), MAXIMUM_SELECT_TIMEOUT)
        if self._instrument is not None:
            self._instrument.before_io_wait(timeout)
        return timeout

    def _clean_timer_heap(self) -> None:
        """Drop cancelled timers: from the head always, from the whole heap when they pile up.

        Discussion: lazy cancellation makes ``cancel()`` O(1): the handle is
        only marked.  But a program that sets a timeout per request and
        cancels it when the answer comes (the common case) would fill the heap
        with dead timers, and every push and pop costs log(heap size).  When
        the dead are both many and the majority, one pass rebuilds the heap
        from the living in O(n) (heapify); the majority rule keeps that rare
        enough to cost O(1) per cancelled timer on average.
        """
        heap = self._scheduled
        if (self._cancelled_timers > _MIN_CANCELLED_TIMERS
                and self._cancelled_timers > _CANCELLED_TIMERS_FRACTION * len(heap)):
            alive = []
            for timer in heap:
                if timer._cancelled:
                    timer._in_heap = False
                else:
                    alive.append(timer)
            heapq.heapify(alive)
            self._scheduled = heap = alive
            self._cancelled_timers = 0
        # A cancelled timer at the head would set the timeout: pop it now.
        while heap and heap[0]._cancelled:
            self._cancelled_timers -= 1
            heapq.heappop(heap)._in_heap = False

    def _process_events(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        """Queue the reader and/or writer callback of each ready file descriptor."""
        if self._instrument is not None:
            self._instrument.after_io_wait(len(events))
        ready = self._ready  # (a local: this loop runs once per ready descriptor)
        for key, mask in events:
            reader, writer = key.data
            if mask & EVENT_READ and reader is not None:
                ready.append(reader)
            if mask & EVENT_WRITE and writer is not None:
                ready.append(writer)

    def _move_due_timers(self) -> None:
        """Pop every timer whose deadline has come from the heap onto the ready queue.

        Discussion: ``end`` is now plus the clock's resolution.  The timeout we
        gave select() was ``when - now`` rounded by floating point, and a
        clock that reads back a hair before ``when`` must not make us go round
        once more with a zero timeout for a timer that is, to the clock's
        precision, due.
        """
        if not self._scheduled and self._instrument is None:
            return  # no timers, nothing due: spare the clock read (this runs every iteration)
        queued = len(self._ready)  # (for instruments: how many timers this moves)
        # exercise timer-heap: begin
        end = self.time() + CLOCK_RESOLUTION
        heap = self._scheduled
        while heap and heap[0]._when <= end:
            timer = heapq.heappop(heap)
            timer._in_heap = False
            if timer._cancelled:
                self._cancelled_timers -= 1  # lazy cancellation: dropped here
            else:
                self._ready.append(timer)
        # exercise timer-heap: end
        if self._instrument is not None:
            self._instrument.timers_due(len(self._ready) - queued, len(self._ready))

    def _run_handle(self, handle: Handle) -> None:
        """Run one handle: timed in debug mode, between the instruments' hooks.

        Discussion: from Python 3.12 a callback's error keeps, in its
        traceback, the frames that ran it and, through each frame's
        ``f_back``, this one and ``_run_ready``'s.  Both let go of the handle
        before they return: its arguments may hold the error (a failed
        future), and a cycle through a frame is freed only by the cyclic GC.
        """
        if not self._debug and self._instrument is None:
            handle._run()
            handle = None  # type: ignore[assignment]
            return
        if self._instrument is not None:
            self._instrument.before_callback(handle)
        start = self.time()
        handle._run()
        duration = self.time() - start
        if self._instrument is not None:
            self._instrument.after_callback(handle)
        if self._debug and duration >= self.slow_callback_duration:
            self._logger.warning("Executing %r took %.3f seconds", handle, duration)
        handle = None  # type: ignore[assignment]

    # -- Running and stopping -----------------------------------------------------

    def run_forever(self) -> None:
        """Run iterations until :meth:`stop` is called; then return.

        KeyboardInterrupt and SystemExit (from a signal handler or a callback)
        propagate out of here; the loop is left stopped and can be run again.
        Raises RuntimeError if the loop is closed or already running.
        """
        self._check_closed()
        if self._thread_id is not None:
            raise RuntimeError("this loop is already running")
        if getattr(_running, "loop", None) is not None:
            raise RuntimeError("cannot run a loop while another loop "
                               "is running in this thread")
        self._thread_id = threading.get_ident()
        _running.loop = self
        if self._instrument is not None:
            self._instrument.before_run(self)
        try:
            # This while loop is our event loop.
            while True:
                self.run_once()
                if self._stopping:
                    break
        finally:
            self._stopping = False
            self._thread_id = None
            _running.loop = None
            if self._instrument is not None:
                self._instrument.after_run(self)

    def stop(self) -> None:
        """Ask :meth:`run_forever` to return after the current iteration.

        Called before ``run_forever``, it makes the next run do one iteration
        and return (as asyncio's ``stop`` does).
        """
        self._stopping = True

    def is_running(self) -> bool:
        return self._thread_id is not None

    def is_closed(self) -> bool:
        return self._closed

    def get_debug(self) -> bool:
        """True in debug mode (see the class docstring)."""
        return self._debug

    def set_debug(self, enabled: bool) -> None:
        self._debug = enabled

    def add_instrument(self, instrument: Any) -> None:
        """Call ``instrument``'s hooks from now on (see :class:`tinyloop.trace.instrument.Instrument`).

        ``instrument`` is any object with some of the hook methods; adding it
        twice does nothing.  One whose hook raises is removed and logged.
        Raises TypeError if it has no hook at all.  The model is trio's
        ``trio.lowlevel.add_instrument``.
        """
        instruments.add_instrument(self, instrument)

    def remove_instrument(self, instrument: Any) -> bool:
        """Stop calling ``instrument``'s hooks; True if it was installed."""
        return instruments.remove_instrument(self, instrument)

    def close(self) -> None:
        """Drop every callback, and close the self-pipe and the selector.

        Idempotent.  Raises RuntimeError if the loop is running.  File
        descriptors registered with add_reader/add_writer are not closed:
        they belong to whoever registered them.
        """
        if self.is_running():
            raise RuntimeError("cannot close a running loop")
        if self._closed:
            return
        self._close_self_pipe()
        self._closed = True
        self._ready.clear()
        self._scheduled.clear()
        self._cancelled_timers = 0
        self._selector.close()

    # -- Errors --------------------------------------------------------------------

    def set_exception_handler(self, handler: Callable[[Loop, dict[str, Any]], object] | None) -> None:
        """Send errors to ``handler(loop, context)`` instead of the log; None restores the default."""
        if handler is not None and not callable(handler):
            raise TypeError(f"a handler must be callable or None, got {handler!r}")
        self._exception_handler = handler

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """Report an error that has nowhere else to go.

        ``context`` holds ``"message"`` (a str) and, as they apply,
        ``"exception"`` (with its ``__traceback__``), ``"handle"``,
        ``"future"``, ``"task"``.  The default handler logs it all at ERROR
        level on the ``tinyloop`` logger; a handler that raises is itself
        reported through the default one.  Never raises (except
        KeyboardInterrupt and SystemExit).
        """
        if self._exception_handler is None:
            self.default_exception_handler(context)
            return
        try:
            self._exception_handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.default_exception_handler({
                "message": "Unhandled error in exception handler",
                "exception": exc,
                "context": context,
            })

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        """Log ``context``: its message, every other entry by repr, and the traceback."""
        message = context.get("message") or "Unhandled exception in event loop"
        exception = context.get("exception")
        exc_info = (type(exception), exception, exception.__traceback__) if exception else None
        lines = [message]
        for key in sorted(context):
            if key not in ("message", "exception"):
                lines.append(f"{key}: {context[key]!r}")
        self._logger.error("\n".join(lines), exc_info=exc_info)

    # -- The self-pipe ---------------------------------------------------------------
    #
    # Discussion: another thread cannot interrupt select(); but it can make a
    # descriptor the loop watches readable.  We keep a connected socket pair
    # (a pipe that also works on Windows), watch one end for reading, and
    # write one byte to the other end to wake the loop.  The reader callback
    # just drains the bytes: its only job was to end the wait.  Linux's
    # eventfd(2) (os.eventfd) does the same with one descriptor instead of
    # two; the socket pair works everywhere Python does.

    def _make_self_pipe(self) -> None:
        self._ssock, self._csock = socket.socketpair()
        self._ssock.setblocking(False)
        self._csock.setblocking(False)
        self.add_reader(self._ssock, self._read_from_self)

    def _read_from_self(self) -> None:
        try:
            while self._ssock.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _write_to_self(self) -> None:
        try:
            self._csock.send(b"\0")
        except OSError:
            # BlockingIOError: the pipe is full of wake-ups already, so the
            # loop will wake anyway.  Anything else: the loop is closing.
            pass

    def _close_self_pipe(self) -> None:
        self.remove_reader(self._ssock)
        self._ssock.close()
        self._csock.close()  # a late call_soon_threadsafe then fails to send, quietly

    # -- Checks ------------------------------------------------------------------------

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("the loop is closed")

    def _check_callback(self, callback: object, method: str) -> None:
        self._check_closed()
        if not callable(callback):
            raise TypeError(f"{method}: a callback must be callable, got {callback!r}")

    def _check_thread(self) -> None:
        if self._thread_id is not None and self._thread_id != threading.get_ident():
            raise RuntimeError("non-thread-safe call from another thread; "
                               "use call_soon_threadsafe")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self.is_running() else "stopped"
        return (f"<{type(self).__name__} {state} ready={len(self._ready)} "
                f"timers={len(self._scheduled)} debug={self._debug}>")
