"""Traps: the only way a coroutine speaks to the scheduler.

A coroutine here is a plain generator.  It never registers a callback and
never touches the reactor.  When it must wait (for a socket, for time, for
another task) or ask for something only the scheduler can do (start a task,
name the running task), it *yields a trap*: a tuple ``(name, *args)`` such
as ``("trap_read_wait", sock)``.  The scheduler looks the name up in its
table of ``trap_*`` methods, carries the request out, and resumes the
coroutine with the answer: the value of its ``yield`` expression, or an
exception raised at that ``yield``.  This is how an operating system kernel
is entered (a trap instruction with a call number), and the name is curio's.

Rules this file keeps:
  * One tiny generator function per trap, and these functions are the only
    places in tinyloop that yield a trap.  Everything else calls them, so a
    reader who wants to know what a coroutine can ask of the scheduler reads
    this file and nothing else.
  * The same functions serve both schedulers.  Under the stack scheduler a
    coroutine writes ``yield read_wait(sock)``: the generator is pushed on
    the task's stack, yields its trap, and returns the answer to its caller.
    Under the yield-from scheduler it writes ``yield from read_wait(sock)``
    and the interpreter passes the trap through.
  * A trap's first element is the name of the scheduler method that handles
    it, so a search for ``trap_sleep`` finds both ends.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

__all__ = ["Cancelled", "cancel", "current_task", "join", "read_wait", "sleep", "spawn",
           "write_wait"]

# What a coroutine is, to the type checker: a generator that yields traps (or,
# under the stack scheduler, other generators) and returns its result.
Coroutine = Generator[Any, Any, Any]


class Cancelled(BaseException):
    """Raised inside a task, at the trap it waits in, when the task is cancelled.

    Discussion: a BaseException, not an Exception, so that the everyday
    ``except Exception:`` in a coroutine does not swallow its own
    cancellation (asyncio.CancelledError made the same move in Python 3.8).
    A task may catch it to clean up, and should then let it propagate.
    """


def read_wait(fileobj: Any) -> Coroutine:
    """Wait until ``fileobj`` (a socket, or an int file descriptor) is readable.

    Returns None.  Readable means a ``recv`` or ``accept`` will not block:
    data, end of stream, an error, or a queued connection.  Raises
    RuntimeError if another task already waits to read the same descriptor.
    """
    return (yield ("trap_read_wait", fileobj))


def write_wait(fileobj: Any) -> Coroutine:
    """Wait until ``fileobj`` (a socket, or an int file descriptor) is writable.

    Returns None.  Raises RuntimeError if another task already waits to
    write the same descriptor.
    """
    return (yield ("trap_write_wait", fileobj))


def sleep(seconds: float) -> Coroutine:
    """Wait ``seconds`` (by the reactor's clock); ``sleep(0)`` lets other ready tasks run.

    Returns None.
    """
    return (yield ("trap_sleep", seconds))


def spawn(coro: Coroutine) -> Coroutine:
    """Start the generator ``coro`` as a new task; returns its :class:`Task`.

    The new task first runs at the reactor's next turn; the caller goes on at
    once.
    """
    return (yield ("trap_spawn", coro))


def join(task: Any) -> Coroutine:
    """Wait for ``task`` to finish; return its result, or raise its exception.

    A task that was cancelled raises :class:`Cancelled` in its joiners too.
    Raises RuntimeError if a task joins itself.
    """
    return (yield ("trap_join", task))


def current_task() -> Coroutine:
    """Return the :class:`Task` that is running this coroutine."""
    return (yield ("trap_current_task",))


def cancel(task: Any) -> Coroutine:
    """Ask ``task`` to stop: :class:`Cancelled` is raised in it at its current trap.

    Returns True if the request was made, False if ``task`` had already
    finished.  Does not wait: ``join`` the task to wait for it to unwind.
    """
    return (yield ("trap_cancel", task))
