"""The same scheduler, with ``yield from`` keeping each task's stack.

``yield from callee`` (PEP 380, Python 3.3) does inside the interpreter what
the stack scheduler's trampoline does by hand: it runs the callee until it
returns, passes everything the callee yields up to whoever resumed the
caller, passes every value and exception sent down back into the callee,
and makes the callee's ``return`` value the value of the expression.  The
chain of suspended frames *is* the stack.  A task is then one generator,
and stepping it is a single ``send`` that comes back with a trap.

Rules this file keeps:
  * Everything but the trampoline is inherited: the trap table and its
    handlers, spawn, join, cancel, close, error reports.  What changes is
    one method, so the two schedulers can be read side by side.
  * Coroutines call with ``yield from``; a generator yielded bare is a
    mistake (it would be a call on the stack scheduler), raised in the task
    as TypeError at that ``yield``.
"""

from __future__ import annotations

from typing import Any

from tinyloop.generators.scheduler import SUSPENDED, Scheduler, Task

__all__ = ["YieldFromScheduler"]


class YieldFromScheduler(Scheduler):
    """A :class:`~tinyloop.generators.scheduler.Scheduler` whose tasks call with ``yield from``.

    Same constructor, methods and traps; ``task.stack`` always holds just the
    task's own coroutine.
    """

    def _trampoline(self, task: Task, value: Any, exc: BaseException | None) -> None:
        """Resume ``task``'s coroutine and carry out its traps until it waits or ends.

        Only the top of the chain of ``yield from`` frames ever yields to us,
        and only traps: calls and returns inside the task never reach the
        scheduler.
        """
        coro = task.coro
        while True:
            try:
                if exc is None:
                    trap = coro.send(value)
                else:
                    trap = coro.throw(exc)
            except StopIteration as stop:
                self._finish(task, stop.value, None)
                return
            except BaseException as error:
                self._finish(task, None, error)
                return
            value, exc = self._dispatch(task, trap)
            if value is SUSPENDED:
                return
