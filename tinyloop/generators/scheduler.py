"""A coroutine scheduler on the callbacks reactor, where each task's call
stack is kept by hand.

The callbacks chapter left us with a reactor that calls a function when a
socket is ready or a timer is due, and with code cut into those functions.
Here the code is written straight again, as generators, and the scheduler
turns it back into callbacks: a coroutine yields a *trap* (traps.py) to say
what it waits for; the scheduler registers a reactor callback for that
event; the callback resumes the coroutine where it stopped.

Rules this file keeps:
  * A task is a stack of generators.  The bottom one is the coroutine the
    task was spawned with; the top one runs.  Yielding a generator *calls*
    it: push.  A generator that returns hands ``StopIteration.value`` to the
    one below: pop, send.  An exception that escapes a generator is thrown
    into the one below: pop, throw.  Yielding a tuple is a trap.  The loop
    that does all this is the trampoline, ``Scheduler._trampoline``.
  * The trampoline is the only place that resumes a generator.  Every
    reactor callback the scheduler registers (readiness, a timer, the ready
    queue) ends in ``_step``, which calls it.
  * A trap handler either answers at once (the task goes on in the same
    step, without a trip through the reactor) or suspends the task and
    leaves in ``task._undo`` how to withdraw what it registered.  Exactly one
    event wakes a suspended task: cancelling withdraws the registration
    before it wakes the task with Cancelled.
  * Tasks own their sockets; the scheduler owns only its registrations.
    ``close()`` closes every task's generators, so their ``finally`` blocks
    run and close what they opened.
  * An error ends its task only.  It is reported with the task and its
    traceback (``on_error``), joiners receive it, and the scheduler goes on.
    KeyboardInterrupt and SystemExit end their task and then propagate out
    of the reactor, as Ctrl-C should.
"""

from __future__ import annotations

import itertools
import sys
import traceback
from collections.abc import Callable
from functools import partial
from types import GeneratorType
from typing import Any

from tinyloop.callbacks.loop import Loop
from tinyloop.generators.traps import Cancelled, Coroutine
from tinyloop.serving import log

__all__ = ["SUSPENDED", "Scheduler", "Task", "report_error"]

# What a trap handler returns when the task must wait: the trampoline returns
# to the reactor, and a callback registered by the handler resumes the task.
SUSPENDED = object()

_task_ids = itertools.count(1)

# How a task may end by exception without it being an error to report:
# cancelled, or interrupted (and then the interrupt goes on, out of run()).
_NOT_ERRORS = (Cancelled, KeyboardInterrupt, SystemExit)


class Task:
    """One coroutine being run by a scheduler, with its stack of generators.

    Made by :meth:`Scheduler.spawn` (or the ``spawn`` trap), never directly.
    ``done`` is True once it has finished; then ``result`` holds what its
    coroutine returned, or ``exception`` what escaped it (a :class:`Cancelled`
    if it was cancelled).
    """

    def __init__(self, coro: Coroutine) -> None:
        self.id = next(_task_ids)
        self.name: str = getattr(coro, "__qualname__", type(coro).__name__)
        self.coro = coro               # the generator it was spawned with
        self.stack = [coro]            # generators, caller below callee; the top one runs
        self.done = False
        self.result: Any = None
        self.exception: BaseException | None = None
        self.trap: tuple[Any, ...] | None = None  # the wait it is suspended in, for repr
        self._undo: Callable[[], object] | None = None  # withdraws that wait; None if not waiting
        self._joiners: list[Task] = []  # tasks suspended in join() on this one
        self._must_cancel = False      # cancel() came while it was not suspended

    @property
    def cancelled(self) -> bool:
        """True if the task ended by :class:`Cancelled`."""
        return isinstance(self.exception, Cancelled)

    def __repr__(self) -> str:
        if self.done:
            state = "cancelled" if self.cancelled else "failed" if self.exception else "done"
        elif self.trap is not None:
            state = "waiting in " + self.trap[0] + repr(self.trap[1:]).replace(",)", ")")
        else:
            state = "ready"
        return f"<Task {self.id} {self.name} {state}>"


def report_error(task: Task, error: BaseException) -> None:
    """The default ``on_error``: a line naming the task, then its traceback, on stderr."""
    log(f"{task!r}: {type(error).__name__}: {error}")
    sys.stderr.write("".join(traceback.format_exception(error)))


class Scheduler:
    """Runs tasks (stacks of generators) on a :class:`~tinyloop.callbacks.loop.Loop`.

    ``loop`` is the reactor to register with; by default a new ``Loop()``
    that the scheduler closes in :meth:`close`.  ``on_error(task, exception)``
    is called when a task fails and nobody joins it (default:
    :func:`report_error`).

    Use :meth:`run` for a whole program, or :meth:`spawn` and the loop's own
    ``run_forever`` to share a loop with other code.
    """

    def __init__(self, loop: Loop | None = None, *,
                 on_error: Callable[[Task, BaseException], object] = report_error) -> None:
        self.loop = loop if loop is not None else Loop()
        self.on_error = on_error
        # The scheduler's state, all of it:
        self.tasks: dict[int, Task] = {}   # every task not yet finished, by id
        self._readers: dict[int, Task] = {}  # fd -> the task suspended in read_wait on it
        self._writers: dict[int, Task] = {}  # fd -> the task suspended in write_wait on it
        self._main: Task | None = None     # the task run() waits for: its end stops the loop
        self._owns_loop = loop is None
        # The trap table: "trap_sleep" -> self.trap_sleep, and so on.
        self._traps = {name: getattr(self, name) for name in dir(self) if name.startswith("trap_")}

    # -- Running --------------------------------------------------------------

    def spawn(self, coro: Coroutine) -> Task:
        """Make ``coro`` (a generator object) a task, to be started at the reactor's next turn.

        Returns the :class:`Task`.  Raises TypeError if ``coro`` is not a
        generator (a common slip: passing the function instead of calling it).
        """
        if not isinstance(coro, GeneratorType):
            raise TypeError(f"spawn() needs a generator (call the function first), got {coro!r}")
        task = Task(coro)
        self.tasks[task.id] = task
        self.loop.call_soon(self._step, task, None, None)
        if self.loop._instrument is not None:  # tinyloop.trace's hooks, if any
            self.loop._instrument.task_spawned(task)
        return task

    def run(self, coro: Coroutine) -> Any:
        """Run ``coro`` as the main task until it finishes; return its result or raise its exception.

        Other tasks it spawned and left running are then closed, and the
        scheduler with them: ``run`` is a whole program, like ``asyncio.run``.
        KeyboardInterrupt (Ctrl-C, or SIGTERM through the CLI) propagates
        after the same clean-up.
        """
        try:
            main = self._main = self.spawn(coro)
            self.loop.run_forever()
            if not main.done:
                raise RuntimeError("the loop stopped before the main task finished")
            if main.exception is not None:
                raise main.exception
            return main.result
        finally:
            self.close()

    def cancel(self, task: Task) -> bool:
        """Raise :class:`Cancelled` in ``task`` at its current trap.

        Returns False if the task has already finished, else True.  A task
        waiting in a trap has its wait withdrawn and is woken at the reactor's
        next turn; a running or already-woken task gets Cancelled at its next
        step, or at its next trap if it cancelled itself.
        """
        if task.done:
            return False
        if task._undo is not None:
            task._undo()
            self._wake(task, None, Cancelled())
        else:
            task._must_cancel = True
        return True

    def close(self) -> None:
        """Close every unfinished task's generators, then the loop if the scheduler made it.

        Each task's wait is withdrawn first; then its generators are closed
        from the top of the stack down (``generator.close()`` raises
        GeneratorExit at the ``yield``), so their ``finally`` blocks run.  The
        tasks end as cancelled, without waking joiners: nothing will run again.
        """
        for task in list(self.tasks.values()):
            if task._undo is not None:
                task._undo()
                task._undo = None
            for generator in reversed(task.stack):
                try:
                    generator.close()
                except Exception as error:  # e.g. a generator that yields in finally
                    self.on_error(task, error)
            task.stack.clear()
            task.done, task.exception = True, Cancelled("scheduler closed")
        self.tasks.clear()
        if self._owns_loop:
            self.loop.close()

    # -- The trampoline ---------------------------------------------------------

    def _step(self, task: Task, value: Any = None, exc: BaseException | None = None) -> None:
        """Resume ``task`` with ``value`` (or by raising ``exc``) and run it until it waits or ends.

        The one entry from the reactor into a task: every callback the
        scheduler registers is this method, or ends by calling it.
        """
        if task.done:
            return  # closed by close() while a wake-up was queued
        task._undo = task.trap = None
        if task._must_cancel:
            # Cancelled while a wake-up was already queued: Cancelled wins.
            task._must_cancel = False
            value, exc = None, Cancelled()
        if self.loop._instrument is None:
            self._trampoline(task, value, exc)
            return
        self.loop._instrument.before_task_step(task)
        try:
            self._trampoline(task, value, exc)
        finally:
            if self.loop._instrument is not None:
                self.loop._instrument.after_task_step(task, task.trap)
                if task.done:
                    self.loop._instrument.task_exited(task)

    def _trampoline(self, task: Task, value: Any, exc: BaseException | None) -> None:
        """Run the top of ``task``'s stack: call, return, raise and trap, until it waits or ends."""
        stack = task.stack
        while True:
            try:
                if exc is None:
                    yielded = stack[-1].send(value)
                else:
                    yielded = stack[-1].throw(exc)
            except StopIteration as stop:
                # exercise trampoline-return: begin
                # The generator returned: pop it, send its value to its caller.
                stack.pop()
                if not stack:
                    self._finish(task, stop.value, None)
                    return
                value, exc = stop.value, None
                continue
                # exercise trampoline-return: end
            except BaseException as error:
                # exercise trampoline-throw: begin
                # An exception escaped the generator: pop it, throw the exception
                # into its caller, where an ``except`` may catch it.
                stack.pop()
                if not stack:
                    self._finish(task, None, error)
                    return
                value, exc = None, _drop_own_frame(error)
                continue
                # exercise trampoline-throw: end
            if isinstance(yielded, GeneratorType):
                # A call: push the callee; it starts at the next send(None).
                stack.append(yielded)
                value = exc = None
                continue
            value, exc = self._dispatch(task, yielded)
            if value is SUSPENDED:
                return

    def _dispatch(self, task: Task, trap: Any) -> tuple[Any, BaseException | None]:
        """Carry out ``trap`` (a tuple ``(name, *args)``) for ``task``.

        Returns ``(SUSPENDED, None)`` if the task now waits, else the
        ``(value, None)`` or ``(None, exception)`` to resume it with at once.
        A trap that cannot be carried out (unknown name, wrong arguments, a
        busy descriptor) becomes an exception raised in the task, at its yield.
        """
        try:
            handler = self._traps[trap[0]]
        except (KeyError, TypeError, IndexError):
            return None, TypeError(_not_a_trap(trap))
        try:
            return handler(task, *trap[1:]), None
        except (Exception, Cancelled) as error:
            return None, error

    def _finish(self, task: Task, result: Any, exc: BaseException | None) -> None:
        """Record that ``task`` ended; wake its joiners; report an error nobody will see.

        Called by the trampoline, with the exception it caught (if any).
        """
        if exc is not None:
            exc = _drop_own_frame(exc)
        task.done, task.result, task.exception = True, result, exc
        del self.tasks[task.id]
        joiners, task._joiners = task._joiners, []
        for joiner in joiners:
            self._wake(joiner, result, exc)
        if task is self._main:
            self.loop.stop()  # run() raises or returns for it
        elif exc is not None and not joiners and not isinstance(exc, _NOT_ERRORS):
            self.on_error(task, exc)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            # Discussion: the task is recorded as finished first, so close()
            # will not try to close its (already closed) generators; then the
            # interrupt goes on out of the reactor and stops the program.
            raise exc

    def _suspend(self, task: Task, trap: tuple[Any, ...], undo: Callable[[], object]) -> object:
        """Park ``task`` in ``trap`` (a name and its arguments, for repr); ``undo`` withdraws it.

        Every blocking trap handler ends by returning this.  A task that
        cancelled itself while it ran is not parked: Cancelled is raised at
        the trap instead.
        """
        if task._must_cancel:
            task._must_cancel = False
            undo()
            raise Cancelled()
        task.trap, task._undo = trap, undo
        return SUSPENDED

    def _wake(self, task: Task, value: Any, exc: BaseException | None) -> None:
        """Resume the suspended ``task`` at the reactor's next turn, with ``value`` or ``exc``.

        For wake-ups that come from inside another task's step (join, cancel):
        stepping the task right here would nest one trampoline in another.
        """
        task._undo = None
        self.loop.call_soon(self._step, task, value, exc)

    # -- The traps ------------------------------------------------------------------
    #
    # One method per trap in traps.py, named by the trap's first element.
    # Each takes the task that yielded the trap, then the trap's arguments.

    def trap_read_wait(self, task: Task, fileobj: Any) -> object:
        return self._io_wait(task, "read_wait", fileobj, self._readers,
                             self.loop.add_reader, self.loop.remove_reader)

    def trap_write_wait(self, task: Task, fileobj: Any) -> object:
        return self._io_wait(task, "write_wait", fileobj, self._writers,
                             self.loop.add_writer, self.loop.remove_writer)

    def trap_sleep(self, task: Task, seconds: float) -> object:
        # exercise trap-sleep: begin
        timer = self.loop.call_later(seconds, self._step, task, None, None)
        return self._suspend(task, ("sleep", seconds), timer.cancel)
        # exercise trap-sleep: end

    def trap_spawn(self, task: Task, coro: Coroutine) -> Task:
        return self.spawn(coro)

    def trap_join(self, task: Task, other: Task) -> object:
        _check_task(other)
        if other.done:
            if other.exception is not None:
                raise other.exception
            return other.result
        if other is task:
            raise RuntimeError(f"{task!r} cannot join itself")
        other._joiners.append(task)
        return self._suspend(task, ("join", other), partial(other._joiners.remove, task))

    def trap_current_task(self, task: Task) -> Task:
        return task

    def trap_cancel(self, task: Task, other: Task) -> bool:
        _check_task(other)
        return self.cancel(other)

    def _io_wait(self, task: Task, name: str, fileobj: Any, waiters: dict[int, Task],
                 add: Callable[..., object], remove: Callable[[int], object]) -> object:
        """Park ``task`` until ``fileobj`` is ready: ``add`` registers, ``remove`` withdraws.

        Discussion: the registration is one-shot.  When the descriptor is
        ready we remove it before resuming the task, and the task's next wait
        adds it again: two epoll_ctl calls per wait, which the callbacks
        server, registered once per connection, does not pay.  Keeping it
        registered would be cheaper but wrong twice over.  Readiness is
        level-triggered, so a socket left registered while its task is busy
        elsewhere (sending, say) would wake the loop at every turn with nobody
        to resume.  And a task may close its socket as soon as it is resumed;
        a registration that outlived it would point at a descriptor number
        the next accept() may reuse.
        """
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        other = waiters.get(fd)
        if other is not None:
            raise RuntimeError(f"{task!r} cannot {name} on fd {fd}: {other!r} is waiting on it")
        add(fd, self._io_ready, waiters, remove, fd)
        waiters[fd] = task
        return self._suspend(task, (name, fd), partial(self._io_withdraw, waiters, remove, fd))

    def _io_ready(self, waiters: dict[int, Task], remove: Callable[[int], object], fd: int) -> None:
        """The reactor's callback for a ready descriptor: withdraw the wait, resume its task."""
        task = waiters[fd]
        self._io_withdraw(waiters, remove, fd)
        self._step(task, None, None)

    @staticmethod
    def _io_withdraw(waiters: dict[int, Task], remove: Callable[[int], object], fd: int) -> None:
        del waiters[fd]
        remove(fd)


def _check_task(task: Any) -> None:
    if not isinstance(task, Task):
        raise TypeError(f"expected a Task (what spawn returns), got {task!r}")


def _not_a_trap(yielded: Any) -> str:
    """The message for a coroutine that yielded something the scheduler cannot use."""
    if isinstance(yielded, GeneratorType):
        return (f"yielded the generator {yielded.__qualname__}() where a trap was expected: "
                f"call it with `yield from`")
    return f"yielded {yielded!r}, which is not a trap (see tinyloop/generators/traps.py)"


def _drop_own_frame(error: BaseException) -> BaseException:
    """``error`` without the trampoline's own line at the head of its traceback.

    Discussion: an exception caught in a ``_trampoline`` method has gained a
    traceback entry for the trampoline itself.  Thrown into the caller as it is, the
    next hop would add the caller, and the one after the trampoline again, so
    a traceback through five generators would list the scheduler five times
    between them.  Dropping our own entry at each hop leaves the traceback
    a reader expects: the generators, caller above callee, as if they had
    called each other.  (``yield from`` gives that for free: the
    interpreter never leaves the chain of frames.)
    """
    tb = error.__traceback__
    if tb is not None and tb.tb_frame.f_code.co_name == "_trampoline":
        error.__traceback__ = tb.tb_next
    return error
