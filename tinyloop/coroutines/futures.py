"""A Future: a result that is not there yet.  Someone will call set_result()
or set_exception() on it later (a callback of the reactor, another task, a
thread through call_soon_threadsafe); whoever needs the result either adds
a done-callback or, inside a coroutine, writes ``await future``.

What ``await future`` does is the whole trick of this stage, and at heart
it is three lines of ``Future.__await__``:

    if not self.done():
        yield self              # suspend: hand this future to whoever drives us
    return self.result()        # resumed: the result, or its exception raised here

``await`` is ``yield from`` for awaitables (PEP 492): the ``yield self``
travels up through every ``await`` in the coroutine's call chain to the
code that called ``coro.send()``.  That code is a Task (tasks.py); it sees
a future come out, asks to be called back when the future is done, and
sends into the coroutine again then.

Rules this file keeps:
  * A future knows its loop, and its done-callbacks always run through
    ``loop.call_soon``, never inside set_result().  Whoever completes a
    future is never re-entered by the code waiting on it.
  * States only move forward: pending -> finished (result or exception) or
    pending -> cancelled.  Setting a result twice is an InvalidStateError.
  * An exception nobody retrieved is not lost: when the future is garbage
    collected it goes to the loop's exception handler.
  * Names and semantics follow asyncio's Future (Lib/asyncio/futures.py), so
    the two can be read side by side; we do not reuse it, because seeing
    it built is the point of this stage.
"""

from __future__ import annotations

import concurrent.futures
import weakref
from collections.abc import Callable, Generator
from typing import Any

from tinyloop.callbacks.loop import Loop, get_running_loop

__all__ = ["CancelledError", "Future", "InvalidStateError", "run_in_executor"]


class CancelledError(BaseException):
    """The future, or the task awaiting it, was cancelled.

    Raised by ``result()`` of a cancelled future, and so at the ``await`` of a
    cancelled task.  Discussion: a BaseException, as asyncio's is since
    Python 3.8, so that ``except Exception:`` in application code does not
    swallow a cancellation by accident.
    """


class InvalidStateError(Exception):
    """The operation is not allowed in the future's current state (e.g. a second set_result)."""


_PENDING, _CANCELLED, _FINISHED = "pending", "cancelled", "finished"


class Future:
    """A result that will be set later; ``await future`` waits for it.

    ``loop`` (default: the running loop) runs the done-callbacks.  Raises
    RuntimeError if no loop is given and none is running.
    """

    _log_traceback = False  # an exception is set and nobody has looked at it

    def __init__(self, *, loop: Loop | None = None) -> None:
        self._loop = loop if loop is not None else get_running_loop()
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._cancel_message: str | None = None
        self._callbacks: list[Callable[[Future], object]] = []

    def get_loop(self) -> Loop:
        return self._loop

    # -- asking -------------------------------------------------------------------

    def done(self) -> bool:
        """True once the future has a result, an exception, or was cancelled."""
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> Any:
        """The result; or raise the exception set, or CancelledError.

        Raises InvalidStateError while the future is pending.
        """
        if self._state == _CANCELLED:
            raise self._make_cancelled_error()
        if self._state == _PENDING:
            raise InvalidStateError("the result is not set yet")
        self._log_traceback = False
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        """The exception set, or None if a result was set.

        Raises CancelledError if cancelled, InvalidStateError while pending.
        """
        if self._state == _CANCELLED:
            raise self._make_cancelled_error()
        if self._state == _PENDING:
            raise InvalidStateError("the exception is not set yet")
        self._log_traceback = False
        return self._exception

    # -- completing ---------------------------------------------------------------

    def set_result(self, result: Any) -> None:
        """Complete the future with ``result``; raises InvalidStateError if already done."""
        if self._state != _PENDING:
            raise InvalidStateError(f"{self!r} is already done")
        self._result = result
        self._state = _FINISHED
        self._schedule_callbacks()

    def set_exception(self, exception: BaseException | type[BaseException]) -> None:
        """Complete the future with ``exception`` (an instance or a class).

        Raises InvalidStateError if already done; TypeError for StopIteration,
        which cannot travel through a coroutine (PEP 479).
        """
        if self._state != _PENDING:
            raise InvalidStateError(f"{self!r} is already done")
        if isinstance(exception, type):
            exception = exception()
        if isinstance(exception, StopIteration):
            raise TypeError("StopIteration cannot be raised into a coroutine (PEP 479)")
        self._exception = exception
        self._state = _FINISHED
        self._log_traceback = True
        self._schedule_callbacks()

    def cancel(self, msg: str | None = None) -> bool:
        """Cancel the future if it is pending; True if it was.

        Its done-callbacks are scheduled, and ``result()`` raises
        ``CancelledError(msg)`` from now on.
        """
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._cancel_message = msg
        self._schedule_callbacks()
        return True

    def _make_cancelled_error(self) -> CancelledError:
        if self._cancel_message is None:
            return CancelledError()
        return CancelledError(self._cancel_message)

    # -- callbacks ----------------------------------------------------------------

    def add_done_callback(self, fn: Callable[[Future], object]) -> None:
        """Call ``fn(future)`` through ``loop.call_soon`` once the future is done (at once if it is)."""
        if self._state != _PENDING:
            self._loop.call_soon(fn, self)
        else:
            self._callbacks.append(fn)

    def remove_done_callback(self, fn: Callable[[Future], object]) -> int:
        """Remove every registration of ``fn``; return how many there were."""
        kept = [callback for callback in self._callbacks if callback != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks[:] = kept
        return removed

    def _schedule_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            self._loop.call_soon(callback, self)

    # -- await ----------------------------------------------------------------------

    def __await__(self) -> Generator[Future, None, Any]:
        """What ``await future`` runs: suspend until done, then return the result.

        The ``yield`` that hands the Task a Future: whatever a coroutine
        awaits, if it has to wait, what comes out of its ``send()`` is a
        Future (or None, from the bare yield of ``sleep(0)``; see tasks.py).
        """
        if not self.done():
            yield self  # the Task adds a done-callback and suspends us
        if not self.done():
            raise RuntimeError("await was not used with a Task: the future is still pending")
        return self.result()

    __iter__ = __await__  # so ``yield from future`` works in a generator-based coroutine too

    # -- reporting ------------------------------------------------------------------

    def __del__(self) -> None:
        # Discussion: the only moment we know for sure that nobody will ever
        # ask for the exception is when nobody *can*: the future is being
        # freed.  asyncio reports "exception was never retrieved" the same way.
        if not self._log_traceback:
            return
        self._loop.call_exception_handler({
            "message": f"{type(self).__name__} exception was never retrieved",
            "exception": self._exception,
            "future": self,
        })

    def __repr__(self) -> str:
        if self._state == _FINISHED:
            if self._exception is not None:
                state = f"finished exception={self._exception!r}"
            else:
                state = f"finished result={self._result!r}"
        else:
            state = self._state
        return f"<{type(self).__name__} {state}>"


# -- threads ------------------------------------------------------------------------
#
# A blocking or CPU-bound call stalls every task on the loop.  The escape is a
# thread: run the call in a pool, and give the loop a Future that completes
# when the thread is done.  The thread must not touch the Future itself (a
# Future belongs to its loop's thread), so it asks the loop to do it, through
# call_soon_threadsafe: the self-pipe of the callbacks chapter, at work.

_default_executors: weakref.WeakKeyDictionary[Loop, concurrent.futures.ThreadPoolExecutor] = \
    weakref.WeakKeyDictionary()


def run_in_executor(executor: concurrent.futures.Executor | None, fn: Callable[..., Any],
                    *args: Any) -> Future:
    """Run ``fn(*args)`` in ``executor``'s threads; return a Future of its result.

    ``executor`` None means the running loop's default thread pool (created
    on first use; :func:`shutdown_default_executor` stops it).  The Future is
    completed on the loop's thread.  Cancelling it cancels the call if it has
    not started (a running thread cannot be stopped).  Like
    ``asyncio.loop.run_in_executor``; must be called with a loop running.
    """
    loop = get_running_loop()
    if executor is None:
        executor = _default_executors.get(loop)
        if executor is None:
            executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="tinyloop")
            _default_executors[loop] = executor
    future = Future(loop=loop)
    concurrent_future = executor.submit(fn, *args)

    def copy_state(done: concurrent.futures.Future) -> None:  # on the loop's thread
        if future.cancelled():
            return
        if done.cancelled():
            future.cancel()
        elif (exception := done.exception()) is not None:
            future.set_exception(exception)
        else:
            future.set_result(done.result())

    def on_thread_done(done: concurrent.futures.Future) -> None:  # on the worker's thread
        try:
            loop.call_soon_threadsafe(copy_state, done)
        except RuntimeError:
            pass  # the loop was closed meanwhile: nobody is waiting any more

    def on_cancel(fut: Future) -> None:
        if fut.cancelled():
            concurrent_future.cancel()

    future.add_done_callback(on_cancel)
    concurrent_future.add_done_callback(on_thread_done)
    return future


def shutdown_default_executor(loop: Loop) -> None:
    """Stop ``loop``'s default thread pool, if it has one, waiting for running calls."""
    executor = _default_executors.pop(loop, None)
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)
