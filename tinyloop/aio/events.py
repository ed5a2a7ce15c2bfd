"""Handles that run their callback inside a contextvars.Context.  CPython's
Lib/asyncio/events.py holds them too, beside the abstract classes
(AbstractEventLoop, AbstractServer, the policy base) which we import from
asyncio rather than write again: they are the contract, not an
implementation.  The policy that makes asyncio use our loop is in
unix_events.py, with the loop, as CPython's default policy is.

Rules this file keeps:
  * Part II's Handle is reused, and one method is overridden: a Part II
    handle calls ``callback(*args)``, an asyncio handle calls
    ``context.run(callback, *args)`` (PEP 567), so the callback sees the
    context variables of whoever scheduled it.  Everything else (the
    fields, cancel(), the error report) is Part II's.
  * Handle.__init__ sets Part II's fields itself rather than calling
    super().__init__(): it is the hottest constructor in the loop (the
    chapter's table of changes prices it).
  * A cancelled handle drops its callback and arguments (Part II's
    cancel); its context goes with them.
  * In debug mode a handle keeps ``_source_traceback``, the stack that
    made it (asyncio's name and format), and an error in its callback
    says where it was scheduled.  Handles can be weakly referenced, as
    asyncio's can.

Where this differs from CPython: asyncio's Handle is one class; ours
subclasses Part II's.  asyncio formats a callback with its source line in
debug mode; we name the callback and, when it is a task's step, the task
(what a reader of a slow-callback warning needs).
"""

from __future__ import annotations

import asyncio
import asyncio.format_helpers
import contextvars
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from tinyloop.callbacks import loop as reactor

__all__ = ["DEBUG_ENV", "DebugHandle", "DebugTimerHandle", "Handle", "TimerHandle",
           "debug_from_environment"]

# Debug mode for our loops, as for asyncio's (see debug_from_environment).
DEBUG_ENV = "PYTHONASYNCIODEBUG"


def debug_from_environment() -> bool:
    """Whether a new loop starts in debug mode: ``-X dev``, ``PYTHONASYNCIODEBUG``
    or ``TINYLOOP_DEBUG`` (the Part II switch) set to a non-empty string.

    ``PYTHONASYNCIODEBUG`` is ignored under ``-E``, as asyncio ignores it
    (``asyncio.coroutines._is_debug_mode``).  Source: the asyncio docs,
    "Developing with asyncio", "Debug Mode".
    """
    if sys.flags.dev_mode:
        return True
    if sys.flags.ignore_environment:
        return False
    return bool(os.environ.get(DEBUG_ENV) or os.environ.get(reactor.DEBUG_ENV))


class _InContext:
    """What Handle and TimerHandle add to Part II's: a context to run in, and names."""

    __slots__ = ()

    # Where the handle was made: a list of FrameSummary in debug mode (the
    # Debug* classes below), None otherwise (asyncio's attribute).
    _source_traceback: list | None = None

    def get_context(self) -> contextvars.Context:
        """The context the callback runs in (``asyncio.Handle.get_context``, 3.12+)."""
        return self._context  # type: ignore[attr-defined]

    def _run(self) -> None:
        try:
            if self._args:  # type: ignore[attr-defined]
                self._context.run(self._callback, *self._args)  # type: ignore[attr-defined]
            else:
                # A transport's reader has no arguments: spare the argument
                # tuple that ``*()`` would build on every read.
                self._context.run(self._callback)  # type: ignore[attr-defined]
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(exc)  # type: ignore[attr-defined]
        # From 3.12 the frames of a callback's error reach back to this
        # frame (frame.f_back), and it holds the handle, the handle its
        # arguments (a failed future), the future the error: a cycle only
        # the cyclic GC frees.  Let go of the handle (asyncio does too).
        self = None  # type: ignore[assignment]

    def _report(self, exc: BaseException) -> None:
        context = {
            "message": f"Exception in callback {self._format_callback()}",
            "exception": exc,
            "handle": self,
        }
        if self._source_traceback:
            context["source_traceback"] = self._source_traceback
        self._loop.call_exception_handler(context)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        owner = getattr(self._callback, "__self__", None)  # type: ignore[attr-defined]
        if isinstance(owner, asyncio.Task):
            # A task's step stands for its task, as asyncio's log lines
            # print it ("Executing <Task pending ...> took 0.2 seconds").
            return repr(owner)
        return super().__repr__()  # type: ignore[misc]

    def _format_callback(self) -> str:
        callback = self._callback  # type: ignore[attr-defined]
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, asyncio.Future):
            # A task's step (C tasks schedule a TaskStepMethWrapper, Python
            # tasks a bound method; both have __self__): name the task, which
            # says which coroutine ran and where it waits now.
            return repr(owner)
        return super()._format_callback()  # type: ignore[misc]


class Handle(_InContext, reactor.Handle):
    """A callback waiting in the ready queue or the selector, run in ``context``.

    ``context`` is a :class:`contextvars.Context`; None takes a copy of the
    current one, as ``asyncio.Handle`` does.  Returned by ``call_soon``,
    ``call_soon_threadsafe``, ``add_reader`` and ``add_writer``.
    """

    __slots__ = ("_context", "__weakref__")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: Any,
                 context: contextvars.Context | None = None) -> None:
        self._context = contextvars.copy_context() if context is None else context
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._loop = loop
        self._repr = None


class TimerHandle(_InContext, reactor.TimerHandle):
    """A handle in the timer heap, due at ``when()`` seconds on ``loop.time()``.

    Returned by ``call_later`` and ``call_at``; compare ``asyncio.TimerHandle``.
    """

    __slots__ = ("_context", "__weakref__")

    def __init__(self, when: float, sequence: int, callback: Callable[..., object],
                 args: tuple[Any, ...], loop: Any, context: contextvars.Context | None = None) -> None:
        self._context = contextvars.copy_context() if context is None else context
        super().__init__(when, sequence, callback, args, loop)


# Discussion: debug mode's handles are classes of their own, so that the
# handle made outside it (every call_soon of a busy server) pays nothing for
# the stack it does not keep: the loop picks the class once, in the branch
# its debug checks already take.

class DebugHandle(Handle):
    """A :class:`Handle` made in debug mode: it keeps the stack of whoever made it."""

    __slots__ = ("_source_traceback",)

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: Any,
                 context: contextvars.Context | None = None) -> None:
        super().__init__(callback, args, loop, context)
        # From the method that made us (call_soon trims its own frame, as
        # asyncio's does).
        self._source_traceback = asyncio.format_helpers.extract_stack(sys._getframe(1))


class DebugTimerHandle(TimerHandle):
    """A :class:`TimerHandle` made in debug mode, keeping its maker's stack."""

    __slots__ = ("_source_traceback",)

    def __init__(self, when: float, sequence: int, callback: Callable[..., object],
                 args: tuple[Any, ...], loop: Any, context: contextvars.Context | None = None) -> None:
        super().__init__(when, sequence, callback, args, loop, context)
        self._source_traceback = asyncio.format_helpers.extract_stack(sys._getframe(1))


# -- The policy's old address ---------------------------------------------------
#
# The policy lives in unix_events.py, beside the loop it makes, as asyncio's
# does (CPython's unix_events.DefaultEventLoopPolicy): this module is below
# the loop, and a policy here had to reach up to it.  The old name still
# answers, on first use (PEP 562), with the public one: the package's
# tinyloop.aio.EventLoopPolicy.

def __getattr__(name: str) -> Any:
    if name == "EventLoopPolicy":
        return importlib.import_module("tinyloop.aio").EventLoopPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
