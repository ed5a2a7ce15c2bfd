"""A Task runs a coroutine on the reactor, one step at a time.

A coroutine object (what calling an ``async def`` function returns) is a
generator in disguise: ``coro.send(None)`` runs it up to its next
suspension and hands back what it yielded; ``coro.throw(exc)`` resumes it
with an exception raised at that point; ``StopIteration(value)`` says it
returned.  Nothing in Python runs a coroutine by itself.  A Task is the
code that does, and a step is one ``send``:

    yielded = coro.send(None)                 # run to the next suspension
    yielded.add_done_callback(self._wakeup)   # a Future: wait for it
    ... the reactor runs other callbacks ...
    _wakeup -> the next step                  # the future is done: send again

That is the whole scheduler.  The reactor of the callbacks chapter does the
waiting; a Task only turns "the future is done" into "send into the
coroutine again".  And because a Task is itself a Future (done when its
coroutine returns), ``await task`` works by the same Future.__await__.

Rules this file keeps:
  * Only a Task calls ``coro.send`` or ``coro.throw``, and only from its
    ``_step``, which always runs as a reactor callback.
  * A coroutine may yield a Future of this loop (wait for it) or None (a
    bare yield: let the others run, come back next iteration); anything
    else is a bug in the coroutine and is thrown back into it.
  * Cancelling a task cancels the future it waits on, so the CancelledError
    comes out of the ``await`` that is waiting: the coroutine can catch it,
    clean up in ``finally``, and its awaited future (a sleep's timer, a
    socket's reader) is released.  A task may refuse by catching it; a
    cancel is a request, as in asyncio.
  * ``run(main)`` is the one entry point: it makes a loop, runs ``main`` to
    completion, then cancels and finishes every task left, and closes the loop.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import types
import weakref
from collections.abc import Awaitable, Coroutine, Generator, Iterator
from typing import Any

from tinyloop.callbacks.loop import Loop, get_running_loop
from tinyloop.coroutines.futures import (CancelledError, Future, InvalidStateError,
                                         shutdown_default_executor)

__all__ = ["Task", "all_tasks", "create_task", "current_task", "ensure_future", "gather", "run",
           "sleep", "wait_for"]

# Every task not yet collected, to cancel at the end of run(); and the task
# each loop is stepping right now.
_all_tasks: weakref.WeakSet[Task] = weakref.WeakSet()
_current_tasks: dict[Loop, Task] = {}


class Task(Future):
    """A Future that runs ``coro`` (a coroutine object) on ``loop`` (default: the running loop).

    The first step is scheduled at once with ``loop.call_soon``.  The task's
    result is the coroutine's return value, its exception what the coroutine
    raised.  Raises TypeError if ``coro`` is not a coroutine.
    """

    def __init__(self, coro: Coroutine[Any, Any, Any], *, loop: Loop | None = None,
                 name: str | None = None) -> None:
        if not (hasattr(coro, "send") and hasattr(coro, "throw")):
            raise TypeError(f"a Task runs a coroutine, not {coro!r}")
        super().__init__(loop=loop)
        self._coro = coro
        self._name = name or getattr(coro, "__qualname__", type(coro).__name__)
        self._waiting_on: Future | None = None  # the future the coroutine awaits
        self._must_cancel = False               # cancel() came while no future could take it
        self._loop.call_soon(self._step)
        _all_tasks.add(self)
        if self._loop._instrument is not None:  # tinyloop.trace's hooks, if any
            self._loop._instrument.task_spawned(self)

    def get_coro(self) -> Coroutine[Any, Any, Any]:
        return self._coro

    def get_name(self) -> str:
        return self._name

    def cancel(self, msg: str | None = None) -> bool:
        """Ask the task to stop: CancelledError(msg) is raised inside its coroutine.

        Returns False if the task is done already.  The exception arrives at
        the ``await`` the coroutine is suspended in (by cancelling the future
        it waits on), or at its next step if it has not started or is running.
        """
        # exercise task-cancel: begin
        if self.done():
            return False
        self._log_traceback = False
        waiting_on = self._waiting_on
        if waiting_on is not None and waiting_on.cancel(msg):
            # The future's done-callback (_wakeup) will step us, and the
            # coroutine's ``await`` will raise the future's CancelledError.
            return True
        # Not waiting (a first step to come, or we are running): throw it in
        # at the next step.
        self._must_cancel = True
        self._cancel_message = msg
        return True
        # exercise task-cancel: end

    def _step(self, exc: BaseException | None = None) -> None:
        """Run the coroutine to its next suspension: the only caller of send() and throw()."""
        if self.done():
            raise InvalidStateError(f"_step(): already done: {self!r}")
        if self._must_cancel:
            exc = self._make_cancelled_error()
            self._must_cancel = False
        self._waiting_on = None
        _current_tasks[self._loop] = self
        if self._loop._instrument is not None:
            self._loop._instrument.before_task_step(self)
        try:
            # exercise task-step: begin
            if exc is None:
                yielded = self._coro.send(None)
            else:
                yielded = self._coro.throw(exc)
            # exercise task-step: end
        except StopIteration as stop:
            if self._must_cancel:  # cancelled during this very step: honour it
                self._must_cancel = False
                Future.cancel(self, self._cancel_message)
            else:
                self.set_result(stop.value)
        except CancelledError as error:
            Future.cancel(self, error.args[0] if error.args else None)
        except (KeyboardInterrupt, SystemExit) as error:
            self.set_exception(error)
            self._log_traceback = False  # it is not lost: it propagates out of the loop
            raise
        except BaseException as error:
            self.set_exception(error)
        else:
            self._wait_on(yielded)
        finally:
            del _current_tasks[self._loop]
            if self._loop._instrument is not None:
                self._loop._instrument.after_task_step(self, self._waiting_on)
                if self.done():
                    self._loop._instrument.task_exited(self)

    def _wait_on(self, yielded: Any) -> None:
        """Arrange for the next step, according to what the coroutine yielded."""
        # exercise task-step: begin
        if isinstance(yielded, Future):
            if yielded._loop is not self._loop:
                error = RuntimeError(f"task {self._name!r} awaited a future of another loop")
                self._loop.call_soon(self._step, error)
            elif yielded is self:
                self._loop.call_soon(self._step, RuntimeError("a task cannot await itself"))
            else:
                self._waiting_on = yielded
                yielded.add_done_callback(self._wakeup)
                if self._must_cancel and yielded.cancel(self._cancel_message):
                    self._must_cancel = False  # cancel() was called during the step
        elif yielded is None:
            self._loop.call_soon(self._step)  # a bare yield: after everyone ready now
        else:
            error = RuntimeError(f"task {self._name!r} yielded {yielded!r}; "
                                 "a coroutine may only await Futures")
            self._loop.call_soon(self._step, error)
        # exercise task-step: end

    def _wakeup(self, future: Future) -> None:
        # The awaited future is done.  Its result or exception is not passed
        # here: Future.__await__ picks it up with future.result() when the
        # coroutine resumes, so it is raised at the ``await``, in the
        # coroutine's own frame.
        self._step()

    def __repr__(self) -> str:
        coro = getattr(self._coro, "__qualname__", None) or repr(self._coro)
        return super().__repr__()[:-1] + f" name={self._name!r} coro={coro}()>"


def current_task(loop: Loop | None = None) -> Task | None:
    """The task whose step is running on ``loop`` (default: the running loop), or None."""
    return _current_tasks.get(loop if loop is not None else get_running_loop())


def all_tasks(loop: Loop | None = None) -> set[Task]:
    """The tasks of ``loop`` (default: the running loop) that are not done."""
    loop = loop if loop is not None else get_running_loop()
    return {task for task in list(_all_tasks) if task._loop is loop and not task.done()}


def create_task(coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> Task:
    """Start ``coro`` as a Task on the running loop; its first step runs next iteration."""
    return Task(coro, loop=get_running_loop(), name=name)


def ensure_future(aw: Awaitable[Any], *, loop: Loop | None = None) -> Future:
    """``aw`` itself if it is a Future (or Task); a Task running it if it is a coroutine.

    Any other awaitable (an object with ``__await__``) is wrapped in a
    coroutine first.  Raises TypeError for anything else.
    """
    if isinstance(aw, Future):
        return aw
    if isinstance(aw, types.CoroutineType) or (hasattr(aw, "send") and hasattr(aw, "throw")):
        return Task(aw, loop=loop)  # type: ignore[arg-type]
    if hasattr(aw, "__await__"):
        return Task(_await(aw), loop=loop)
    raise TypeError(f"an awaitable is required, not {aw!r}")


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


# -- sleeping ------------------------------------------------------------------------


@types.coroutine
def _yield_now() -> Generator[None, None, None]:
    """Suspend for one iteration: the bare ``yield`` that the Task turns into call_soon."""
    yield


async def sleep(delay: float, result: Any = None) -> Any:
    """Suspend for ``delay`` seconds (on the loop's clock); then return ``result``.

    ``delay <= 0`` does not touch the timer heap: it yields once, so every
    other task that is ready runs before this one goes on.  Cancellation
    cancels the timer too.
    """
    if delay <= 0:
        await _yield_now()
        return result
    loop = get_running_loop()
    future = Future(loop=loop)
    timer = loop.call_later(delay, _set_result_unless_done, future, result)
    try:
        return await future
    finally:
        timer.cancel()  # if we were cancelled, the timer must not outlive us


def _set_result_unless_done(future: Future, result: Any) -> None:
    if not future.done():
        future.set_result(result)


# -- combining -------------------------------------------------------------------------


class _GatheringFuture(Future):
    """The future gather() returns: cancelling it cancels every child."""

    def __init__(self, children: list[Future], *, loop: Loop) -> None:
        super().__init__(loop=loop)
        self._children = children

    def cancel(self, msg: str | None = None) -> bool:
        if self.done():
            return False
        for child in self._children:
            child.cancel(msg)
        return super().cancel(msg)


def gather(*aws: Awaitable[Any], return_exceptions: bool = False) -> Future:
    """Run ``aws`` concurrently; a Future of the list of their results, in order.

    Coroutines are wrapped in Tasks.  If one fails (or is cancelled) and
    ``return_exceptions`` is False, the Future fails at once with that
    exception, and the others go on running; with True, exceptions take
    their place in the list.  Cancelling the returned Future cancels them all.
    """
    loop = get_running_loop()
    children = [ensure_future(aw, loop=loop) for aw in aws]
    outer = _GatheringFuture(children, loop=loop)
    if not children:
        outer.set_result([])
        return outer
    pending = len(children)

    def on_child_done(child: Future) -> None:
        nonlocal pending
        pending -= 1
        if outer.done():
            if not child.cancelled():
                child.exception()  # retrieved: do not report it as lost
            return
        if not return_exceptions:
            if child.cancelled():
                outer.set_exception(child._make_cancelled_error())
                return
            if (exception := child.exception()) is not None:
                outer.set_exception(exception)
                return
        if pending == 0:
            outer.set_result([_outcome(child) for child in children])

    for child in children:
        child.add_done_callback(on_child_done)
    return outer


def _outcome(child: Future) -> Any:
    if child.cancelled():
        return child._make_cancelled_error()
    return child.exception() or child.result()


async def wait_for(aw: Awaitable[Any], timeout: float | None) -> Any:
    """Await ``aw``, but for at most ``timeout`` seconds (None: no limit).

    On timeout ``aw`` is cancelled and TimeoutError is raised.  If the task
    calling wait_for is cancelled, ``aw`` is cancelled with it (it is the
    future that task awaits) and CancelledError propagates.
    """
    loop = get_running_loop()
    inner = ensure_future(aw, loop=loop)
    if timeout is None:
        return await inner
    timed_out = False

    def on_timeout() -> None:
        nonlocal timed_out
        timed_out = inner.cancel()

    timer = loop.call_later(timeout, on_timeout)
    try:
        return await inner
    except CancelledError:
        if timed_out:
            raise TimeoutError(f"timed out after {timeout} seconds") from None
        raise
    finally:
        timer.cancel()


# -- running ---------------------------------------------------------------------------


def run(main: Coroutine[Any, Any, Any], *, debug: bool | None = None, loop: Loop | None = None) -> Any:
    """Run coroutine ``main`` on a new loop until it returns; return its result.

    Then (also when ``main`` raised, and when KeyboardInterrupt arrived)
    every task still running is cancelled and run to its end, so their
    ``finally`` blocks close what they hold; the default executor is shut
    down and the loop closed.  ``main``'s exception, or the
    KeyboardInterrupt, propagates.  ``loop`` runs on a given loop instead of
    a new one (it is closed all the same).  Like ``asyncio.run``, and like
    its ``Runner``, a first Ctrl-C (SIGINT) cancels ``main`` and ``run``
    raises KeyboardInterrupt once ``main`` has finished (see ``_sigint_cancels``).
    """
    loop = loop if loop is not None else Loop(debug=debug)
    try:
        task = Task(main, loop=loop)
        task.add_done_callback(lambda _: loop.stop())
        with _sigint_cancels(loop, task) as interrupted:
            loop.run_forever()
        if not task.done():
            raise RuntimeError("the loop stopped before main() finished")
        if interrupted and task.cancelled():
            raise KeyboardInterrupt
        return task.result()
    finally:
        try:
            _cancel_all_tasks(loop)
            shutdown_default_executor(loop)
        finally:
            loop.close()


@contextlib.contextmanager
def _sigint_cancels(loop: Loop, main: Task) -> Iterator[list[int]]:
    """While the ``with`` block runs ``main``: the first SIGINT cancels ``main`` instead of raising.

    Yields a list that holds the signal once it came.  Discussion: Python's
    default handler raises KeyboardInterrupt at whatever bytecode the main
    thread is running, possibly inside a Task's ``_step`` after the step
    was taken off the ready queue and before the task waits on a future
    again.  Such a task is neither scheduled nor waiting: ``cancel()`` can
    only mark it, no step ever comes, and the cancellation that ``run``
    does next never ends (an instrument's hook, run at the start of each
    step, widens that window).  So, as asyncio's ``Runner`` does
    (Lib/asyncio/runners.py), the first SIGINT becomes ``main.cancel()``, a
    request the task takes at its next ``await``, and a write to the
    self-pipe wakes a wait that has no timeout; a second one raises at once.
    Only in the main thread, and only if SIGINT has Python's default handler.
    """
    interrupted: list[int] = []
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield interrupted
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted or main.done():
            raise KeyboardInterrupt
        interrupted.append(signum)
        main.cancel()
        loop.call_soon_threadsafe(lambda: None)

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _cancel_all_tasks(loop: Loop) -> None:
    """Cancel every task of ``loop`` and run the loop until they have all finished."""
    tasks = all_tasks(loop)
    if not tasks:
        return
    remaining = len(tasks)

    def on_done(task: Future) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0:
            loop.stop()

    for task in tasks:
        task.cancel()
        task.add_done_callback(on_done)
    loop.run_forever()
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({
                "message": "unhandled exception during run() shutdown",
                "exception": task.exception(),
                "task": task,
            })
