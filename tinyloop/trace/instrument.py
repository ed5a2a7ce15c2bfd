"""The instrument protocol: what a loop tells an observer as it runs.

An *instrument* is any object with some of the hook methods of
:class:`Instrument` below; the loop calls the ones it has, at fixed points
of its iteration (the model is ``trio.abc.Instrument``, whose names these
follow where trio has the same hook).  A loop keeps its instruments in one
:class:`InstrumentSet`, in the attribute ``loop._instrument``, which is None
when there are none.

Rules this file keeps:
  * Zero cost when nobody listens.  A hook site in a loop is
    ``if self._instrument is not None: self._instrument.hook(...)``: one
    attribute test, no call.  (tinyloop.uv tests a C-level flag instead;
    tinyloop.ring's proactor tests its own copy of the loop's set, which
    the loop's add_instrument and remove_instrument keep in step.)
  * Hooks are optional.  An instrument implements only the hooks it wants;
    the set looks them up once, when the instrument is added, so a hook the
    instrument lacks costs nothing per call either.
  * An instrument never breaks the loop.  A hook that raises an Exception
    has its instrument removed from the loop and the error logged on the
    "tinyloop.trace" logger, with the traceback; the loop goes on.
    KeyboardInterrupt and SystemExit pass through, as from a callback.
  * This module imports no loop and no asyncio (the Part II loops import
    it), so it works for every loop.  asyncio's tasks step as plain
    callbacks; the set recognises them (see ``_asyncio_task``) and reports
    their steps through the task hooks, so one recorder sees tasks on
    tinyloop.aio, tinyloop.uv and stdlib asyncio alike.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

__all__ = ["FOR_NEW_LOOPS", "HOOKS", "Instrument", "InstrumentSet", "Observable", "add_instrument",
           "callback_name", "for_new_loops", "install_for_new_loop", "remove_instrument",
           "task_name"]

logger = logging.getLogger("tinyloop.trace")


class Instrument:
    """The hooks a loop calls, each a no-op here: subclass and override, or write any object.

    Subclassing is optional: the loop looks each hook up by name on the
    object it was given.  Times are not passed: an instrument reads the
    loop's clock (``loop.time()``) when it wants one, so on a virtual clock
    (tests/fakes.py) a trace is the same on every run.  Durations and
    timeouts are in seconds; byte counts are ints.
    """

    # -- the loop ------------------------------------------------------------------

    def before_run(self, loop: Any) -> None:
        """``loop.run_forever()`` has started; ``loop`` is the loop object."""

    def after_run(self, loop: Any) -> None:
        """``loop.run_forever()`` is returning (stopped, or by an exception)."""

    def before_io_wait(self, timeout: float | None) -> None:
        """The loop is about to wait for readiness (``select``, ``epoll_wait``, ``uv_run``'s poll).

        ``timeout``: the longest it will block, in seconds; 0 when work is
        already ready; None to wait until something happens.  On
        tinyloop.uv it comes from a libuv prepare handle, just before the
        poll phase, with ``uv_backend_timeout``'s value.
        """

    def after_io_wait(self, events: int) -> None:
        """The wait has returned with ``events`` ready (file descriptor, event mask) pairs.

        The pairs are not passed: how many is the measure of a readiness API
        (O(ready) for epoll, O(watched) for select's scan).  On tinyloop.uv
        it comes at the end of libuv's poll phase (its check handle), and
        ``events`` counts the I/O callbacks that phase ran: libuv runs each
        ready descriptor's callback as it goes through the ready list, so
        they fall inside the wait (the order KNOWN_DIFFERENCES describes).
        """

    def timers_due(self, count: int, ready: int) -> None:
        """``count`` timers were found due and moved to the ready queue.

        ``ready`` is then the ready queue's length: what this iteration
        will run.  Called once per iteration, after the I/O callbacks were
        queued, also when ``count`` is 0.  On tinyloop.uv it is called when
        libuv's timer fires, in its timers phase (``count`` may be 0: libuv
        counts whole milliseconds and can wake a fraction early).
        """

    def before_phase(self, name: str) -> None:
        """A named phase of the loop's iteration begins (tinyloop.uv: ``"idle"``, ``"check"``).

        Part II's loops and tinyloop.aio have no phases beyond wait, timers
        and callbacks, which the other hooks mark; libuv runs its iteration in
        phases (timers, idle, prepare, poll, check, closing), and the uv loop
        marks the ones where Python code runs.
        """

    def after_phase(self, name: str) -> None:
        """The phase ``name`` (as given to :meth:`before_phase`) has ended."""

    def before_callback(self, handle: Any) -> None:
        """The loop is about to run ``handle`` (its Handle or TimerHandle; on uv, a C handle).

        :func:`callback_name` names it.  Every callback the loop calls is
        bracketed by this and :meth:`after_callback`, including those that
        step a task.
        """

    def after_callback(self, handle: Any) -> None:
        """``handle`` has run (its exception, if any, went to the exception handler)."""

    # -- tasks ---------------------------------------------------------------------

    def task_spawned(self, task: Any) -> None:
        """``task`` was created: a generators ``Task``, a coroutines ``Task`` or an ``asyncio.Task``.

        For ``asyncio.Task`` (tinyloop.aio, tinyloop.uv, stdlib asyncio) the
        set reports it just before the task's first step, as no loop sees
        asyncio's Task constructor.  :func:`task_name` names it.
        """

    def before_task_step(self, task: Any) -> None:
        """``task`` is about to be resumed (one ``send``/``throw`` into its coroutine)."""

    def after_task_step(self, task: Any, awaiting: Any) -> None:
        """``task`` has suspended or ended; ``awaiting`` is what it now waits for.

        A Future (coroutines, asyncio), or the generators scheduler's trap
        tuple such as ``("read_wait", 5)``; None when it yielded bare (it
        runs again next iteration) or has ended.
        """

    def task_exited(self, task: Any) -> None:
        """``task`` has finished: returned, raised or was cancelled (after its last step)."""

    # -- transports ----------------------------------------------------------------

    def transport_read(self, transport: Any, nbytes: int, syscalls: int) -> None:
        """``transport`` read ``nbytes`` bytes (0: end of file) in ``syscalls`` recv calls."""

    def transport_wrote(self, transport: Any, nbytes: int, syscalls: int, buffered: int) -> None:
        """``transport`` handed ``nbytes`` bytes to the kernel in ``syscalls`` send calls.

        ``buffered`` is what is left in its write buffer afterwards, in bytes
        (what flow control compares with the high-water mark).  A write
        that only appended to the buffer reports ``syscalls=0``.
        """

    # -- completions (tinyloop.ring, on io_uring) --------------------------------------

    def sqe_prepared(self, user_data: int, opcode: str, fd: int, target: int) -> None:
        """An operation was written into io_uring's submission queue (an SQE), for the next io_uring_enter.

        ``opcode`` is its name in io_uring_enter(2) without ``IORING_OP_``
        (``"RECV"``, ``"SEND"``, ``"ACCEPT"``, ``"POLL_ADD"``, ``"TIMEOUT"``,
        ``"ASYNC_CANCEL"``, ``"NOP"``...); ``fd`` the descriptor it works on
        (-1 for none); ``user_data`` the number its completion will carry
        back (0: nobody waits for that completion, as for a cancel);
        ``target``, for ``"ASYNC_CANCEL"``, the user_data of the operation it
        asks the kernel to cancel, else 0.
        """

    def before_enter(self) -> None:
        """The loop is about to call io_uring_enter(2): submit what was prepared, and wait.

        It comes inside the wait (between :meth:`before_io_wait` and
        :meth:`after_io_wait`), after the loop prepared the wait's own SQEs
        (its timer, its polls).
        """

    def after_enter(self, submitted: int) -> None:
        """io_uring_enter(2) has returned: the kernel took ``submitted`` SQEs, the oldest prepared first.

        0 when a signal cut the call short with EINTR (what it had taken
        goes with the next call).  The completions it made ready follow,
        one :meth:`cqe_reaped` each.
        """

    def cqe_reaped(self, user_data: int, res: int, flags: int) -> None:
        """A completion (CQE) was taken from the completion queue; its callback runs next.

        ``user_data`` is its operation's (see :meth:`sqe_prepared`); ``res``
        what the operation's system call would have returned (bytes, a new
        descriptor, 0) or -errno; ``flags`` the CQE's flags
        (IORING_CQE_F_MORE, 2: a multishot operation stays armed and
        completes again).  Completions nobody waits for (user_data 0) are
        not reported, nor those of operations prepared before the
        instrument was added.
        """


# Every hook name, in the order of the protocol above.
HOOKS = tuple(name for name in vars(Instrument) if not name.startswith("_"))


class InstrumentSet:
    """The instruments of one loop, and the dispatch of each hook to those that have it.

    Made by :func:`add_instrument`; a loop holds one in ``loop._instrument``
    (or None).  It offers every method of :class:`Instrument`, each calling
    that hook on every instrument that defines it, in the order they were
    added.
    """

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self._instruments: list[Any] = []
        self._hooks: dict[str, tuple[tuple[Any, Callable[..., object]], ...]] = {}
        self._seen_tasks: weakref.WeakSet[Any] = weakref.WeakSet()  # asyncio tasks reported spawned
        self._rebuild()

    def __bool__(self) -> bool:
        return bool(self._instruments)

    def __contains__(self, instrument: object) -> bool:
        return any(item is instrument for item in self._instruments)

    @property
    def instruments(self) -> tuple[Any, ...]:
        return tuple(self._instruments)

    def _rebuild(self) -> None:
        self._hooks = {
            hook: tuple((item, getattr(item, hook)) for item in self._instruments
                        if callable(getattr(item, hook, None)))
            for hook in HOOKS
        }

    def _call(self, hook: str, *args: Any) -> None:
        for instrument, method in self._hooks[hook]:
            try:
                method(*args)
            except Exception:
                logger.exception("instrument %r raised in %s; it is removed from %r",
                                 instrument, hook, self._loop)
                # The loop's method: tinyloop.uv also clears its C flag there.
                self._loop.remove_instrument(instrument)

    # One method per hook; see Instrument for what each receives.

    def before_run(self, loop: Any) -> None:
        self._call("before_run", loop)

    def after_run(self, loop: Any) -> None:
        self._call("after_run", loop)

    def before_io_wait(self, timeout: float | None) -> None:
        self._call("before_io_wait", timeout)

    def after_io_wait(self, events: int) -> None:
        self._call("after_io_wait", events)

    def timers_due(self, count: int, ready: int) -> None:
        self._call("timers_due", count, ready)

    def before_phase(self, name: str) -> None:
        self._call("before_phase", name)

    def after_phase(self, name: str) -> None:
        self._call("after_phase", name)

    def before_callback(self, handle: Any) -> None:
        self._call("before_callback", handle)
        task = _asyncio_task(handle)
        if task is not None:
            if task not in self._seen_tasks:
                self._seen_tasks.add(task)
                self._call("task_spawned", task)
            self._call("before_task_step", task)

    def after_callback(self, handle: Any) -> None:
        task = _asyncio_task(handle)
        if task is not None:
            done = task.done()
            self._call("after_task_step", task, None if done else getattr(task, "_fut_waiter", None))
            if done:
                self._call("task_exited", task)
        self._call("after_callback", handle)

    def task_spawned(self, task: Any) -> None:
        self._call("task_spawned", task)

    def before_task_step(self, task: Any) -> None:
        self._call("before_task_step", task)

    def after_task_step(self, task: Any, awaiting: Any) -> None:
        self._call("after_task_step", task, awaiting)

    def task_exited(self, task: Any) -> None:
        self._call("task_exited", task)

    def transport_read(self, transport: Any, nbytes: int, syscalls: int) -> None:
        self._call("transport_read", transport, nbytes, syscalls)

    def transport_wrote(self, transport: Any, nbytes: int, syscalls: int, buffered: int) -> None:
        self._call("transport_wrote", transport, nbytes, syscalls, buffered)

    def sqe_prepared(self, user_data: int, opcode: str, fd: int, target: int) -> None:
        self._call("sqe_prepared", user_data, opcode, fd, target)

    def before_enter(self) -> None:
        self._call("before_enter")

    def after_enter(self, submitted: int) -> None:
        self._call("after_enter", submitted)

    def cqe_reaped(self, user_data: int, res: int, flags: int) -> None:
        self._call("cqe_reaped", user_data, res, flags)


@runtime_checkable
class Observable(Protocol):
    """The contract between a loop and the code that reports to its instruments.

    Every loop from Part II on keeps its :class:`InstrumentSet` (or None)
    in ``_instrument``; :func:`add_instrument` writes it, and every hook
    site reads it, in the loop and in what runs on it (tasks, streams,
    transports): ``if loop._instrument is not None: loop._instrument.hook(...)``.
    The type checker holds each loop class to this (tests/test_contracts.py),
    so a loop that renamed the slot fails there, not at run time.
    """

    _instrument: InstrumentSet | None


def add_instrument(loop: Observable, instrument: Any) -> None:
    """Install ``instrument`` on ``loop`` (any :class:`Observable` loop).

    Adding one already installed does nothing.  Loops call this from their
    ``add_instrument`` method; a program calls ``loop.add_instrument(obj)``.
    Raises TypeError if ``instrument`` has none of the hooks of :class:`Instrument`.
    """
    if not any(callable(getattr(instrument, hook, None)) for hook in HOOKS):
        raise TypeError(f"{instrument!r} has none of the instrument hooks ({', '.join(HOOKS)})")
    instruments = loop._instrument if loop._instrument is not None else InstrumentSet(loop)
    if instrument in instruments:
        return
    instruments._instruments.append(instrument)
    instruments._rebuild()
    loop._instrument = instruments


def remove_instrument(loop: Observable, instrument: Any) -> bool:
    """Uninstall ``instrument`` from ``loop``; True if it was installed.

    With the last one gone, ``loop._instrument`` is None again, and the hot
    path is back to one attribute test.
    """
    instruments = loop._instrument
    if instruments is None or instrument not in instruments:
        return False
    instruments._instruments = [item for item in instruments._instruments if item is not instrument]
    instruments._rebuild()
    if not instruments:
        loop._instrument = None
    return True


# Instruments that every loop made from now on starts with: how a command
# traces a stage's server, which makes its own loop (see for_new_loops).
FOR_NEW_LOOPS: list[Any] = []


@contextlib.contextmanager
def for_new_loops(*instruments: Any) -> Iterator[None]:
    """Install ``instruments`` on every loop of Parts II-IV and VI made inside the ``with`` block.

    Like the ``instruments=`` argument of ``trio.run``, for code that makes
    its own loop (``serve(listener)``, ``tinyloop.aio.run``).  Loops made
    before or after the block are left alone.
    """
    FOR_NEW_LOOPS.extend(instruments)
    try:
        yield
    finally:
        for instrument in instruments:
            FOR_NEW_LOOPS.remove(instrument)


def install_for_new_loop(loop: Any) -> None:
    """Add the instruments of :func:`for_new_loops` to ``loop``; its ``__init__`` calls this."""
    for instrument in FOR_NEW_LOOPS:
        loop.add_instrument(instrument)   # the loop's method (tinyloop.uv sets its C flag)


def _asyncio_task(handle: Any) -> Any:
    """The ``asyncio.Task`` whose step ``handle`` runs, or None.

    Discussion: asyncio's Task schedules its steps with ``call_soon`` (the
    first, and after a bare ``yield``) and wakes through a done-callback of
    the awaited future; both callbacks are bound to the task (``__self__``:
    the C task's ``TaskStepMethWrapper`` and its ``task_wakeup`` method, or
    the Python task's ``__step`` and ``__wakeup``).  So a loop that knows
    nothing of tasks still tells us when each one steps.
    """
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    owner = getattr(getattr(handle, "_callback", None), "__self__", None)
    return owner if isinstance(owner, asyncio.Task) else None


def callback_name(handle: Any) -> str:
    """A short name for the callback ``handle`` runs: its qualified name, bound methods by their class.

    ``"Client.on_readable"``, ``"Task._step"``, ``"_SelectorSocketTransport._read_ready"``;
    a nested function by its own name; an asyncio task step is ``"Task.step"``.
    Never raises.
    """
    callback = getattr(handle, "_callback", handle)
    while isinstance(callback, functools.partial):
        callback = callback.func
    if callback is None:
        return "cancelled"
    owner = getattr(callback, "__self__", None)
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None and isinstance(owner, asyncio.Task):
        return "Task.step"
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    if name is None:
        return type(callback).__name__
    name = name.rpartition("<locals>.")[2]  # a nested function: its own name
    if owner is not None and not isinstance(owner, type(sys)) and "." not in name:
        name = f"{type(owner).__name__}.{name}"
    return name


def task_name(task: Any) -> str:
    """A task's name: ``get_name()`` (asyncio, coroutines) or ``name`` (generators), else its repr.

    An asyncio task left with its default name (``Task-7``) is named by its
    coroutine function instead.
    """
    get_name = getattr(task, "get_name", None)
    name = get_name() if callable(get_name) else getattr(task, "name", None)
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None and isinstance(task, asyncio.Task) and str(name).startswith("Task-"):
        # asyncio's default name counts tasks process-wide; the coroutine's
        # name says more, and is the same from run to run.
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", None) or name
    if name is None:
        return repr(task)
    return str(name).rpartition("<locals>.")[2]  # a nested coroutine function: its own name
