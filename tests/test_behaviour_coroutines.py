"""The shared Part II behaviour suite, run on the coroutines stage (our Future and Task).

The adapter (``behaviour.adapters.Coroutines``) turns each piece of work into
a Task: ``soon(fn)`` a task that calls ``fn``; ``schedule(delay, fn)`` a task
that awaits ``sleep(delay)`` first; ``wait_readable(sock, fn)`` a task that
awaits the socket's readiness.  A token is the Task, and ``cancel`` is
``Task.cancel()``, which must reach the future the task awaits (the sleep's
timer, the socket's reader).
"""

from __future__ import annotations

from behaviour import LoopBehaviour
from behaviour.adapters import Coroutines


class TestCoroutinesBehaviour(Coroutines, LoopBehaviour):
    pass
