"""The stack scheduler's trampoline (tinyloop/generators/scheduler.py), and the task
API that both generator schedulers share.

Every test runs the scheduler on the callbacks reactor with a virtual clock and
a scripted selector (tests/fakes.py): sleeps take no real time, and a task
that would wait forever makes ``select`` raise WouldBlockForever instead of
hanging the suite.  The first half drives the trampoline with bare ``yield``
calls (stack scheduler only); the second half is parametrised over both
schedulers and writes its coroutines with ``yield from``, which the stack
scheduler runs too.
"""

from __future__ import annotations

import socket
import sys
import traceback

import pytest
from fakes import READ, WRITE, FakeSelector, VirtualClock

from tinyloop.callbacks.loop import Loop
from tinyloop.generators.scheduler import Scheduler, Task
from tinyloop.generators.traps import (Cancelled, cancel, current_task, join, read_wait, sleep,
                                       spawn, write_wait)
from tinyloop.generators.yieldfrom import YieldFromScheduler


class Harness:
    """A scheduler of class ``cls`` on a Loop with a virtual clock and a scripted selector.

    ``failures`` collects the ``(task, exception)`` pairs the scheduler reports;
    an exception that escapes the scheduler into the reactor (a scheduler bug)
    is re-raised by :meth:`run`, and a main task still running after
    ``DEADLINE`` virtual seconds makes it raise RuntimeError.
    """

    def __init__(self, cls: type[Scheduler] = Scheduler) -> None:
        self.clock = VirtualClock()
        self.selector = FakeSelector(self.clock)
        self.loop = Loop(selector=self.selector, clock=self.clock)
        self.loop_errors: list[BaseException] = []
        self.loop.set_exception_handler(lambda loop, context: self.loop_errors.append(context["exception"]))
        self.failures: list[tuple[Task, BaseException]] = []
        self.scheduler = cls(self.loop, on_error=lambda task, error: self.failures.append((task, error)))

    # Virtual seconds after which run() gives up: a broken scheduler whose
    # tasks sleep in a loop forever fails the test instead of spinning.
    DEADLINE = 10_000

    def run(self, coro):
        watchdog = self.loop.call_later(self.DEADLINE, self.loop.stop)
        try:
            result = self.scheduler.run(coro)
        except BaseException:
            self.raise_loop_errors()
            raise
        finally:
            watchdog.cancel()
        self.raise_loop_errors()
        return result

    def raise_loop_errors(self) -> None:
        if self.loop_errors:
            raise AssertionError("an exception escaped the scheduler into the reactor") from self.loop_errors[0]

    def close(self) -> None:
        self.scheduler.close()
        self.loop.close()


@pytest.fixture
def stack():
    harness = Harness(Scheduler)
    yield harness
    harness.close()


@pytest.fixture(params=[Scheduler, YieldFromScheduler], ids=["stack", "yieldfrom"])
def harness(request):
    harness = Harness(request.param)
    yield harness
    harness.close()


def returns(value):
    """A generator that returns ``value`` without ever yielding."""
    return value
    yield  # pragma: no cover  (makes this a generator function)


# --- the trampoline: call and return ------------------------------------------

def test_return_value_is_sent_to_the_caller(stack):
    def main():
        value = yield returns(21)
        return value * 2

    assert stack.run(main()) == 42


def test_return_values_travel_down_a_deep_stack(stack):
    def depth(n):
        if n == 0:
            return 0
        below = yield depth(n - 1)
        return below + 1

    assert stack.run(depth(50)) == 50


def test_a_callee_that_waits_returns_after_its_wait(stack):
    def slow_double(x):
        yield sleep(2.5)
        return x * 2

    def main():
        a = yield slow_double(1)
        b = yield slow_double(a)
        return a, b, stack.loop.time()

    assert stack.run(main()) == (2, 4, 5.0)


def test_the_stack_grows_on_call_and_shrinks_on_return(stack):
    depths = []

    def probe():
        task = yield current_task()
        depths.append(len(task.stack))

    def middle():
        yield probe()
        yield probe()

    def main():
        yield probe()
        yield middle()
        yield probe()

    stack.run(main())
    # main; main+middle+probe twice; main+probe.  (current_task itself was popped.)
    assert depths == [2, 3, 3, 2]


def test_a_stack_deeper_than_the_recursion_limit(stack):
    # A hand-kept stack is a list: each generator is resumed by the trampoline
    # alone, so depth costs no C stack and no Python recursion.
    limit = sys.getrecursionlimit() * 3

    def depth(n):
        if n == 0:
            yield sleep(1)
            return 0
        return (yield depth(n - 1)) + 1

    assert stack.run(depth(limit)) == limit


def test_a_trap_from_deep_in_the_stack_answers_the_top_generator(stack):
    def depth(n):
        if n == 0:
            task = yield current_task()
            yield sleep(0.5)
            return task
        return (yield depth(n - 1))

    def main():
        me = yield current_task()
        found = yield depth(30)
        return found is me

    assert stack.run(main()) is True


def test_yield_from_works_inside_a_stack_task(stack):
    def inner():
        yield sleep(1)  # a call through the trampoline, from inside a yield-from chain
        return "inner"

    def outer():
        return (yield from delegate())

    def delegate():
        value = yield inner()
        return value + "+delegate"

    assert stack.run(outer()) == "inner+delegate"


# --- the trampoline: exceptions -----------------------------------------------

def test_an_exception_in_a_callee_is_raised_in_the_caller(stack):
    def fails():
        yield sleep(1)
        raise ValueError("from the callee")

    def main():
        try:
            yield fails()
        except ValueError as error:
            return f"caught: {error}"

    assert stack.run(main()) == "caught: from the callee"


def test_an_exception_before_the_first_yield_is_raised_in_the_caller(stack):
    def fails_at_once():
        raise KeyError("at once")
        yield  # pragma: no cover

    def main():
        try:
            yield fails_at_once()
        except KeyError:
            return "caught"

    assert stack.run(main()) == "caught"


def test_an_uncaught_exception_unwinds_every_frame_top_first(stack):
    unwound = []

    def frame(n):
        try:
            if n == 0:
                yield sleep(1)
                raise RuntimeError("bottom of the call chain")
            yield frame(n - 1)
        finally:
            unwound.append(n)

    with pytest.raises(RuntimeError, match="bottom of the call chain"):
        stack.run(frame(3))
    assert unwound == [0, 1, 2, 3]


def test_a_caller_that_catches_goes_on_and_returns(stack):
    def fails():
        raise ZeroDivisionError
        yield  # pragma: no cover

    def middle():
        try:
            yield fails()
        except ZeroDivisionError:
            pass
        value = yield returns("after")
        return value

    def main():
        return (yield middle())

    assert stack.run(main()) == "after"


def test_an_exception_thrown_in_by_the_scheduler_reaches_the_callers(stack):
    # A trap's error (here: an unknown trap) is raised in the top generator,
    # and travels down the stack like any other exception.
    def bad_trap():
        return (yield ("trap_no_such_thing",))

    def main():
        try:
            yield bad_trap()
        except TypeError as error:
            return str(error)

    assert "not a trap" in stack.run(main())


def test_the_traceback_lists_the_generators_not_the_trampoline(stack):
    def leaf():
        yield sleep(1)
        raise ValueError("leaf")

    def branch():
        yield leaf()

    def main():
        try:
            yield branch()
        except ValueError as error:
            return [frame.name for frame in traceback.extract_tb(error.__traceback__)]

    assert stack.run(main()) == ["main", "branch", "leaf"]


# --- the trampoline: what may be yielded ----------------------------------------

@pytest.mark.parametrize("yielded", [42, None, "trap_sleep", (), ("trap_nothing",), {"a": 1}])
def test_yielding_something_that_is_not_a_trap_raises_type_error_at_the_yield(stack, yielded):
    def main():
        try:
            yield yielded
        except TypeError as error:
            return str(error)

    assert "not a trap" in stack.run(main())


def test_a_trap_with_wrong_arguments_raises_type_error_at_the_yield(stack):
    def main():
        try:
            yield ("trap_sleep",)
        except TypeError:
            return "caught"

    assert stack.run(main()) == "caught"


def test_spawn_and_join_through_the_stack(stack):
    def child(x):
        yield sleep(x)
        return x * 10

    def main():
        first = yield spawn(child(2))
        second = yield spawn(child(1))
        return (yield join(first)), (yield join(second)), stack.loop.time()

    assert stack.run(main()) == (20, 10, 2.0)


# --- tasks, on both schedulers -------------------------------------------------
#
# The coroutines below call with ``yield from``: valid on both schedulers.

def test_run_returns_the_main_task_result(harness):
    def main():
        yield from sleep(1)
        return "done"

    assert harness.run(main()) == "done"


def test_run_raises_the_main_task_exception_without_reporting_it(harness):
    def main():
        yield from sleep(1)
        raise LookupError("main failed")

    with pytest.raises(LookupError, match="main failed"):
        harness.run(main())
    assert harness.failures == []


def test_spawned_tasks_run_concurrently(harness):
    log = []

    def worker(name, delays):
        for delay in delays:
            yield from sleep(delay)
            log.append((harness.loop.time(), name))

    def main():
        a = yield from spawn(worker("a", [1, 2]))   # at 1, 3
        b = yield from spawn(worker("b", [2, 2]))   # at 2, 4
        yield from join(a)
        yield from join(b)

    harness.run(main())
    assert log == [(1, "a"), (2, "b"), (3, "a"), (4, "b")]


def test_a_spawned_task_starts_after_the_spawner_waits(harness):
    log = []

    def child():
        log.append("child")
        yield from sleep(0)

    def main():
        yield from spawn(child())
        log.append("main, after spawn")
        yield from sleep(0)
        log.append("main, after sleep")

    harness.run(main())
    assert log == ["main, after spawn", "child", "main, after sleep"]


def test_spawn_returns_a_task_and_current_task_names_it(harness):
    seen = []

    def child():
        seen.append((yield from current_task()))

    def main():
        task = yield from spawn(child())
        yield from join(task)
        return task

    task = harness.run(main())
    assert seen == [task]
    assert isinstance(task, Task) and task.done and task.name == "test_spawn_returns_a_task_and_current_task_names_it.<locals>.child"


def test_spawn_needs_a_generator(harness):
    def not_a_coroutine():
        return 1

    def main():
        try:
            yield from spawn(not_a_coroutine)
        except TypeError as error:
            return str(error)

    assert "call the function" in harness.run(main())
    with pytest.raises(TypeError):
        harness.scheduler.spawn(not_a_coroutine())


def test_join_returns_the_result_of_a_finished_task(harness):
    def child():
        return "early"
        yield  # pragma: no cover

    def main():
        task = yield from spawn(child())
        yield from sleep(5)
        assert task.done
        return (yield from join(task))

    assert harness.run(main()) == "early"


def test_join_raises_the_task_exception_and_it_is_not_reported(harness):
    def child():
        yield from sleep(1)
        raise ArithmeticError("child failed")

    def main():
        task = yield from spawn(child())
        try:
            yield from join(task)
        except ArithmeticError as error:
            return str(error)

    assert harness.run(main()) == "child failed"
    assert harness.failures == []


def test_several_tasks_can_join_one(harness):
    def child():
        yield from sleep(1)
        return 7

    def joiner(task):
        return (yield from join(task))

    def main():
        task = yield from spawn(child())
        joiners = []
        for _ in range(3):
            joiners.append((yield from spawn(joiner(task))))
        results = []
        for j in joiners:
            results.append((yield from join(j)))
        return results

    assert harness.run(main()) == [7, 7, 7]


def test_a_task_cannot_join_itself(harness):
    def main():
        me = yield from current_task()
        try:
            yield from join(me)
        except RuntimeError as error:
            return str(error)

    assert "cannot join itself" in harness.run(main())


def test_join_needs_a_task(harness):
    def main():
        try:
            yield from join("not a task")
        except TypeError:
            return "caught"

    assert harness.run(main()) == "caught"


def test_an_error_nobody_joins_is_reported_and_the_scheduler_goes_on(harness):
    log = []

    def fails():
        yield from sleep(1)
        raise ZeroDivisionError("unjoined")

    def survivor():
        yield from sleep(2)
        log.append("survivor finished")

    def main():
        doomed = yield from spawn(fails())
        other = yield from spawn(survivor())
        yield from join(other)
        return doomed

    doomed = harness.run(main())
    assert log == ["survivor finished"]
    assert len(harness.failures) == 1
    task, error = harness.failures[0]
    assert task is doomed and isinstance(error, ZeroDivisionError)
    assert doomed.exception is error


def test_the_default_report_names_the_task_and_prints_the_traceback(capsys):
    clock = VirtualClock()
    loop = Loop(selector=FakeSelector(clock), clock=clock)

    def fails():
        raise ZeroDivisionError("reported")
        yield  # pragma: no cover

    def main():
        task = yield from spawn(fails())
        yield from sleep(1)
        return task

    task = Scheduler(loop).run(main())
    loop.close()
    err = capsys.readouterr().err
    assert repr(task) in err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError: reported" in err
    assert 'in fails' in err and "_trampoline" not in err  # the task's frames, not ours


# --- sleep --------------------------------------------------------------------

def test_sleepers_wake_in_deadline_order_at_their_time(harness):
    log = []

    def sleeper(seconds):
        yield from sleep(seconds)
        log.append((seconds, harness.loop.time()))

    def main():
        tasks = []
        for seconds in (0.3, 0.1, 0.2):
            tasks.append((yield from spawn(sleeper(seconds))))
        for task in tasks:
            yield from join(task)

    harness.run(main())
    assert [entry[0] for entry in log] == [0.1, 0.2, 0.3]
    assert all(abs(woke - seconds) < 1e-9 for seconds, woke in log)


def test_sleep_zero_lets_other_ready_tasks_run(harness):
    log = []

    def counter(name):
        for i in range(3):
            log.append(f"{name}{i}")
            yield from sleep(0)

    def main():
        a = yield from spawn(counter("a"))
        b = yield from spawn(counter("b"))
        yield from join(a)
        yield from join(b)

    harness.run(main())
    assert log == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert harness.loop.time() == 0


# --- cancellation ---------------------------------------------------------------

def test_cancel_raises_cancelled_at_the_trap_and_withdraws_the_timer(harness):
    log = []

    def sleeper():
        try:
            yield from sleep(100)
            log.append("woke")  # never
        except Cancelled:
            log.append(("cancelled at", harness.loop.time()))
            raise
        finally:
            log.append("finally")

    def main():
        task = yield from spawn(sleeper())
        yield from sleep(1)
        assert (yield from cancel(task)) is True
        try:
            yield from join(task)
        except Cancelled:
            log.append("join raised Cancelled")
        return task

    task = harness.run(main())
    assert log == [("cancelled at", 1), "finally", "join raised Cancelled"]
    assert task.cancelled and harness.failures == []
    assert all(timer.cancelled() for timer in harness.loop._scheduled)


def test_cancelling_a_finished_task_returns_false(harness):
    def child():
        return 1
        yield  # pragma: no cover

    def main():
        task = yield from spawn(child())
        yield from join(task)
        return (yield from cancel(task))

    assert harness.run(main()) is False


def test_a_task_cancelled_before_it_starts_never_runs(harness):
    log = []

    def child():
        log.append("ran")
        yield from sleep(0)

    def main():
        task = yield from spawn(child())
        yield from cancel(task)
        try:
            yield from join(task)
        except Cancelled:
            return task

    task = harness.run(main())
    assert log == [] and task.cancelled


def test_cancel_withdraws_a_read_wait(harness):
    a, b = socket.socketpair()
    with a, b:
        def reader():
            yield from read_wait(a)

        def main():
            task = yield from spawn(reader())
            yield from sleep(1)
            assert harness.selector.is_registered(a, READ)
            yield from cancel(task)
            yield from sleep(1)
            return task

        task = harness.run(main())
        assert task.cancelled
        assert not harness.selector.is_registered(a)
        assert harness.scheduler._readers == {}


def test_cancel_withdraws_a_join(harness):
    def slow():
        yield from sleep(10)
        return "slow"

    def waiter(task):
        return (yield from join(task))

    def main():
        target = yield from spawn(slow())
        joiner = yield from spawn(waiter(target))
        yield from sleep(1)
        yield from cancel(joiner)
        yield from sleep(1)
        assert target._joiners == []
        return (yield from join(target)), joiner

    result, joiner = harness.run(main())
    assert result == "slow" and joiner.cancelled


def test_cancelled_wins_over_a_wake_up_already_queued(harness):
    def child():
        yield from sleep(1)
        return "result"

    def waiter(task):
        return (yield from join(task))

    def canceller(victim):
        yield from cancel(victim)

    def main():
        target = yield from spawn(child())
        joiner = yield from spawn(waiter(target))
        # Runs in the same iteration as target's end, after joiner's wake-up was queued.
        yield from sleep(1)
        yield from spawn(canceller(joiner))
        yield from sleep(1)
        return joiner

    joiner = harness.run(main())
    assert joiner.cancelled


def test_a_task_that_cancels_itself_gets_cancelled_at_its_next_wait(harness):
    log = []

    def main():
        me = yield from current_task()
        yield from cancel(me)
        log.append("still running")
        try:
            yield from sleep(1)
        except Cancelled:
            log.append(("cancelled", harness.loop.time()))
            return "caught"

    assert harness.run(main()) == "caught"
    assert log == ["still running", ("cancelled", 0)]


def test_a_task_may_catch_cancelled_and_return(harness):
    def stubborn():
        try:
            yield from sleep(10)
        except Cancelled:
            return "cleaned up"

    def main():
        task = yield from spawn(stubborn())
        yield from sleep(1)
        yield from cancel(task)
        return (yield from join(task)), task.cancelled

    assert harness.run(main()) == ("cleaned up", False)


# --- I/O waits -----------------------------------------------------------------

def test_read_wait_resumes_when_the_selector_says_readable(harness):
    a, b = socket.socketpair()
    with a, b:
        def reader():
            yield from read_wait(a)
            return harness.loop.time()

        def main():
            task = yield from spawn(reader())
            yield from sleep(3)
            assert not task.done
            harness.selector.set_ready(a, READ)
            return (yield from join(task))

        assert harness.run(main()) == 3
        assert not harness.selector.is_registered(a)


def test_write_wait_and_read_wait_on_one_socket_are_independent(harness):
    a, b = socket.socketpair()
    with a, b:
        order = []

        def waiter(trap, name):
            yield from trap(a.fileno())
            order.append(name)

        def main():
            r = yield from spawn(waiter(read_wait, "read"))
            w = yield from spawn(waiter(write_wait, "write"))
            yield from sleep(1)
            assert harness.selector.is_registered(a, READ | WRITE)
            harness.selector.set_ready(a, WRITE, once=True)
            yield from join(w)
            assert not r.done and harness.selector.is_registered(a, READ)
            harness.selector.set_ready(a, READ, once=True)
            yield from join(r)

        harness.run(main())
        assert order == ["write", "read"]


def test_two_tasks_cannot_wait_to_read_one_socket(harness):
    a, b = socket.socketpair()
    with a, b:
        def reader():
            yield from read_wait(a)

        def main():
            first = yield from spawn(reader())
            yield from sleep(1)
            try:
                yield from read_wait(a)
            except RuntimeError as error:
                message = str(error)
            yield from cancel(first)
            return message

        assert "is waiting on it" in harness.run(main())


def test_tasks_talk_over_real_sockets():
    # The one test on a real selector and clock: an echo over a socket pair.
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    def echo_once(sock):
        yield from read_wait(sock)
        data = sock.recv(1024)
        yield from write_wait(sock)
        sock.send(data.upper())

    def main():
        server = yield from spawn(echo_once(b))
        yield from write_wait(a)
        a.send(b"ping")
        yield from read_wait(a)
        reply = a.recv(1024)
        yield from join(server)
        return reply

    loop = Loop()
    loop.call_later(5, loop.stop)  # a watchdog: a broken scheduler fails the test, not hangs it
    with a, b:
        assert Scheduler(loop).run(main()) == b"PING"
    loop.close()


# --- stopping -------------------------------------------------------------------

def test_close_runs_the_finally_blocks_of_unfinished_tasks(harness):
    log = []

    def forever(name):
        try:
            while True:
                yield from sleep(1)
        finally:
            log.append(name)

    def main():
        yield from spawn(forever("a"))
        yield from spawn(forever("b"))
        yield from sleep(2.5)
        return "main done"

    assert harness.run(main()) == "main done"
    assert sorted(log) == ["a", "b"]
    assert harness.scheduler.tasks == {}


def test_keyboard_interrupt_in_a_task_stops_run_after_cleaning_up(harness):
    log = []

    def interrupted():
        yield from sleep(1)
        raise KeyboardInterrupt

    def bystander():
        try:
            yield from sleep(100)
        finally:
            log.append("bystander closed")

    def main():
        yield from spawn(bystander())
        yield from spawn(interrupted())
        yield from sleep(100)

    with pytest.raises(KeyboardInterrupt):
        harness.run(main())
    assert log == ["bystander closed"]
    assert harness.failures == []


def test_task_repr_says_what_it_waits_for(harness):
    def sleeper():
        yield from sleep(5)

    def main():
        task = yield from spawn(sleeper())
        yield from sleep(1)
        waiting = repr(task)
        yield from join(task)
        return waiting, repr(task)

    waiting, finished = harness.run(main())
    assert "sleeper waiting in sleep(5)" in waiting
    assert finished.endswith("sleeper done>")
