"""The yield-from scheduler (tinyloop/generators/yieldfrom.py): what changes when
``yield from`` keeps the stack.

The task API both schedulers share is tested in test_generators_scheduler.py,
parametrised over both; here are the differences: calls never reach the
scheduler, a bare yielded generator is a mistake, and the interpreter's stack
has the interpreter's depth limit.
"""

from __future__ import annotations

import sys
import traceback

import pytest
from test_generators_scheduler import Harness

from tinyloop.generators.scheduler import Scheduler
from tinyloop.generators.traps import current_task, sleep, spawn
from tinyloop.generators.yieldfrom import YieldFromScheduler


@pytest.fixture
def yf():
    harness = Harness(YieldFromScheduler)
    yield harness
    harness.close()


def test_it_reuses_the_stack_scheduler_and_replaces_only_the_trampoline():
    assert issubclass(YieldFromScheduler, Scheduler)
    replaced = {name for name, value in vars(YieldFromScheduler).items() if callable(value)}
    assert replaced == {"_trampoline"}


def test_return_values_come_back_through_yield_from(yf):
    def depth(n):
        if n == 0:
            yield from sleep(1)
            return 0
        return (yield from depth(n - 1)) + 1

    assert yf.run(depth(40)) == 40
    assert yf.loop.time() == 1


def test_exceptions_travel_down_the_yield_from_chain(yf):
    unwound = []

    def frame(n):
        try:
            if n == 0:
                yield from sleep(1)
                raise ValueError("bottom")
            yield from frame(n - 1)
        finally:
            unwound.append(n)

    def main():
        try:
            yield from frame(3)
        except ValueError as error:
            return [f.name for f in traceback.extract_tb(error.__traceback__)]

    names = yf.run(main())
    assert unwound == [0, 1, 2, 3]
    assert names == ["main", "frame", "frame", "frame", "frame"]


def test_the_task_stays_one_generator(yf):
    def inner():
        task = yield from current_task()
        return len(task.stack)

    def main():
        return (yield from inner())

    assert yf.run(main()) == 1


def test_only_traps_reach_the_scheduler(yf, monkeypatch):
    seen = []
    dispatch = Scheduler._dispatch

    def spy(self, task, trap):
        seen.append(trap[0])
        return dispatch(self, task, trap)

    monkeypatch.setattr(YieldFromScheduler, "_dispatch", spy)

    def leaf():
        yield from sleep(0)
        return 1

    def main():
        total = 0
        for _ in range(3):
            total += yield from leaf()
        return total

    assert yf.run(main()) == 3
    assert seen == ["trap_sleep"] * 3


def test_a_bare_yielded_generator_raises_type_error_that_says_yield_from(yf):
    def helper():
        yield from sleep(1)

    def main():
        try:
            yield helper()  # the stack scheduler's call, a slip here
        except TypeError as error:
            return str(error)

    message = yf.run(main())
    assert "yield from" in message and "helper" in message


def test_a_chain_deeper_than_the_recursion_limit_fails_its_task_only(yf):
    # The interpreter's stack is a chain of frames: resuming the innermost
    # passes through every one of them, and Python bounds that depth.
    limit = sys.getrecursionlimit() * 2

    def depth(n):
        if n == 0:
            yield from sleep(1)
            return 0
        return (yield from depth(n - 1)) + 1

    def shallow():
        yield from sleep(2)
        return "fine"

    def main():
        deep = yield from spawn(depth(limit))
        ok = yield from spawn(shallow())
        yield from sleep(3)
        return deep, ok

    deep, ok = yf.run(main())
    assert isinstance(deep.exception, RecursionError)
    assert ok.result == "fine"
    assert [task for task, _ in yf.failures] == [deep]
