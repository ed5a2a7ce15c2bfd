"""The shared Part II behaviour suite, run on both generator schedulers.

The unit of work is a task: ``soon(fn)`` spawns a task that calls ``fn()``,
``schedule(delay, fn)`` one that sleeps first, ``wait_readable(sock, fn)`` one
that waits in ``read_wait`` first; the token is the Task, and ``cancel`` is
``Scheduler.cancel``.  The stack scheduler's tasks call traps with ``yield``,
the yield-from scheduler's with ``yield from`` (``behaviour.adapters``).
"""

from __future__ import annotations

from behaviour import LoopBehaviour
from behaviour.adapters import Generators, YieldFrom


class TestGeneratorsBehaviour(Generators, LoopBehaviour):
    pass


class TestYieldFromBehaviour(YieldFrom, LoopBehaviour):
    pass
