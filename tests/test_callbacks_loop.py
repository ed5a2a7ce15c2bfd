"""Unit tests of the callbacks reactor (tinyloop.callbacks.loop), on a virtual clock and a scripted selector.

What the shared behaviour suite (tests/behaviour) cannot say, because it is
particular to a callback reactor: the timeout each iteration computes, the
exact ordering inside one iteration, how the timer heap is cleaned, the
selector registrations behind add_reader/add_writer, the exception handler's
context, debug mode, the self-pipe, and the loop's life cycle.
"""

from __future__ import annotations

import gc
import logging
import selectors
import socket
import threading
import weakref

import pytest
from fakes import FakeSelector, VirtualClock, WouldBlockForever

from tinyloop.callbacks import loop as loop_module
from tinyloop.callbacks.loop import Handle, Loop, TimerHandle, get_running_loop

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


# The fixtures clock, selector and loop are tests/conftest.py's.


# -- the four steps of one iteration ------------------------------------------------


def test_timeout_is_zero_when_callbacks_are_ready(loop: Loop, selector: FakeSelector) -> None:
    loop.call_soon(lambda: None)
    loop.call_later(5, lambda: None)
    loop.run_once()
    assert selector.timeouts == [0]


def test_timeout_runs_until_the_nearest_timer(loop: Loop, selector: FakeSelector, clock: VirtualClock) -> None:
    loop.call_later(7, lambda: None)
    loop.call_later(2.5, lambda: None)
    loop.run_once()
    assert selector.timeouts == [pytest.approx(2.5)]
    assert clock.now == pytest.approx(102.5)


def test_no_work_means_waiting_without_a_timeout(loop: Loop, selector: FakeSelector) -> None:
    with pytest.raises(WouldBlockForever):
        loop.run_once()
    assert selector.timeouts == [None]


def test_timeout_is_capped(loop: Loop, selector: FakeSelector) -> None:
    loop.call_later(10 * loop_module.MAXIMUM_SELECT_TIMEOUT, lambda: None)
    loop.run_once()
    assert selector.timeouts == [loop_module.MAXIMUM_SELECT_TIMEOUT]


def test_a_cancelled_timer_does_not_set_the_timeout(loop: Loop, selector: FakeSelector) -> None:
    loop.call_later(1, lambda: None).cancel()
    loop.call_later(3, lambda: None)
    loop.run_once()
    assert selector.timeouts == [pytest.approx(3)]


def test_one_iteration_runs_only_what_was_ready_when_it_began(loop: Loop, selector: FakeSelector) -> None:
    log: list[str] = []

    def first() -> None:
        log.append("first")
        loop.call_soon(log.append, "scheduled by first")

    loop.call_soon(first)
    loop.call_soon(log.append, "second")
    loop.run_once()
    assert log == ["first", "second"]
    loop.run_once()
    assert log == ["first", "second", "scheduled by first"]


def test_ordering_within_one_iteration_is_soon_then_io_then_timers(
        loop: Loop, selector: FakeSelector, pair: tuple[socket.socket, socket.socket]) -> None:
    # The lesson of the chapter's "ordering" section, pinned: all three are
    # ready for the same iteration, and it runs the ready queue's old entries,
    # then I/O callbacks (step 3a), then timers that became due (step 3b).
    a, _ = pair
    log: list[str] = []
    loop.call_later(0, log.append, "timer")
    loop.add_reader(a, log.append, "io")
    loop.call_soon(log.append, "soon")
    selector.set_ready(a, once=True)
    loop.run_once()
    assert log == ["soon", "io", "timer"]


def test_a_timer_scheduled_by_a_callback_waits_for_the_next_iteration(loop: Loop) -> None:
    log: list[str] = []
    loop.call_soon(lambda: loop.call_later(0, log.append, "timer"))
    loop.run_once()
    assert log == []
    loop.run_once()
    assert log == ["timer"]


def test_a_handle_cancelled_earlier_in_the_same_iteration_is_skipped(loop: Loop) -> None:
    log: list[str] = []
    victim = None

    def killer() -> None:
        log.append("killer")
        victim.cancel()

    loop.call_soon(killer)
    victim = loop.call_soon(log.append, "victim")
    loop.run_once()
    assert log == ["killer"]
    assert victim.cancelled()


def test_timers_fire_only_when_the_clock_reaches_them(loop: Loop, clock: VirtualClock) -> None:
    log: list[float] = []
    timer = loop.call_at(clock.now + 1, lambda: log.append(clock.now))
    assert isinstance(timer, TimerHandle) and timer.when() == clock.now + 1
    clock.advance(0.5)
    loop.call_soon(lambda: None)  # make the iteration not wait
    loop.run_once()
    assert log == []
    loop.run_once()
    assert log == [pytest.approx(101.0)]


# -- lazy cancellation and the heap clean-up ------------------------------------------


def test_cancelled_timers_stay_in_the_heap_until_the_loop_reaches_them(loop: Loop) -> None:
    timers = [loop.call_later(i + 1, lambda: None) for i in range(10)]
    timers[5].cancel()
    assert len(loop._scheduled) == 10
    assert loop._cancelled_timers == 1


def test_the_heap_is_rebuilt_when_cancelled_timers_are_many_and_the_majority(loop: Loop) -> None:
    many = loop_module._MIN_CANCELLED_TIMERS * 3
    timers = [loop.call_later(i + 1, lambda: None) for i in range(many)]
    for timer in timers[1:]:  # keep the head alive, so only the rebuild can remove them
        if timer is not timers[-1]:
            timer.cancel()
    loop.call_soon(lambda: None)
    loop.run_once()
    assert loop._scheduled == sorted([timers[0], timers[-1]])
    assert loop._cancelled_timers == 0


def test_the_heap_is_not_rebuilt_for_a_few_cancelled_timers(loop: Loop) -> None:
    count = loop_module._MIN_CANCELLED_TIMERS  # all but one cancelled: the majority, but few
    timers = [loop.call_later(i + 1, lambda: None) for i in range(count + 1)]
    for timer in timers[1:]:
        timer.cancel()
    loop.call_soon(lambda: None)
    loop.run_once()
    assert len(loop._scheduled) == count + 1
    assert loop._cancelled_timers == count


def test_the_heap_is_not_rebuilt_while_live_timers_are_the_majority(loop: Loop) -> None:
    timers = [loop.call_later(i + 1, lambda: None) for i in range(1000)]
    for timer in timers[1::3]:
        timer.cancel()
    loop.call_soon(lambda: None)
    loop.run_once()
    assert len(loop._scheduled) == 1000


def test_cancelling_a_due_timer_after_it_left_the_heap_is_not_counted(loop: Loop) -> None:
    timer = loop.call_later(0, lambda: None)
    loop.call_soon(timer.cancel)  # runs in the same iteration, before the timer
    loop.run_once()
    assert loop._cancelled_timers == 0


def test_a_cancelled_handle_drops_its_callback_and_arguments(loop: Loop) -> None:
    payload = object()
    handle = loop.call_later(1, print, payload)
    handle.cancel()
    assert handle._callback is None and handle._args is None
    assert "cancelled" in repr(handle)


# -- readiness registrations ----------------------------------------------------------


def test_reader_and_writer_share_one_registration(loop: Loop, selector: FakeSelector,
                                                   pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    loop.add_reader(a, lambda: None)
    assert selector.get_key(a).events == READ
    loop.add_writer(a, lambda: None)
    assert selector.get_key(a).events == READ | WRITE
    assert loop.remove_reader(a) is True
    assert selector.get_key(a).events == WRITE
    assert loop.remove_writer(a) is True
    assert not selector.is_registered(a)
    assert loop.remove_writer(a) is False
    assert loop.remove_reader(a.fileno()) is False


def test_remove_reader_says_whether_there_was_one(loop: Loop, pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    loop.add_writer(a, lambda: None)
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is True


def test_a_new_reader_replaces_the_old_one(loop: Loop, selector: FakeSelector,
                                           pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    log: list[str] = []
    old = loop.add_reader(a, log.append, "old")
    loop.add_reader(a, log.append, "new")
    assert old.cancelled()
    selector.set_ready(a, once=True)
    loop.run_once()
    assert log == ["new"]


def test_readiness_is_level_triggered(loop: Loop, selector: FakeSelector,
                                      pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    log: list[int] = []
    loop.add_reader(a, lambda: log.append(len(log)))
    selector.set_ready(a)
    for _ in range(3):
        loop.run_once()
    assert log == [0, 1, 2]


def test_read_and_write_readiness_in_one_event_run_both(loop: Loop, selector: FakeSelector,
                                                        pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    log: list[str] = []
    loop.add_reader(a, log.append, "read")
    loop.add_writer(a, log.append, "write")
    selector.set_ready(a, READ | WRITE, once=True)
    loop.run_once()
    assert log == ["read", "write"]


def test_a_reader_removed_earlier_in_the_iteration_does_not_run(loop: Loop, selector: FakeSelector,
                                                                pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    log: list[str] = []
    loop.add_reader(a, lambda: (log.append("a"), loop.remove_reader(b)))
    loop.add_reader(b, log.append, "b")
    selector.set_ready(a, once=True)
    selector.set_ready(b, once=True)
    loop.run_once()
    assert log == ["a"]


# -- errors ---------------------------------------------------------------------------


def test_the_exception_handler_gets_the_context(loop: Loop) -> None:
    contexts: list[dict] = []
    loop.set_exception_handler(lambda lp, context: contexts.append(context))

    def failing_callback(arg: int) -> None:
        raise ValueError(arg)

    handle = loop.call_soon(failing_callback, 42)
    loop.call_soon(lambda: None)
    loop.run_once()
    [context] = contexts
    assert context["handle"] is handle
    assert isinstance(context["exception"], ValueError)
    assert context["exception"].__traceback__ is not None
    assert "failing_callback(42)" in context["message"]


def test_the_default_handler_logs_message_and_traceback(loop: Loop, caplog: pytest.LogCaptureFixture) -> None:
    def failing_callback() -> None:
        raise ZeroDivisionError("boom")

    loop.call_soon(failing_callback)
    with caplog.at_level(logging.ERROR, logger="tinyloop"):
        loop.run_once()
    [record] = caplog.records
    assert "failing_callback" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    assert "ZeroDivisionError: boom" in caplog.text


def test_a_failing_handler_is_reported_by_the_default_one(loop: Loop, caplog: pytest.LogCaptureFixture) -> None:
    def handler(lp: Loop, context: dict) -> None:
        raise RuntimeError("the handler broke")

    loop.set_exception_handler(handler)
    loop.call_soon(lambda: 1 / 0)
    log: list[str] = []
    loop.call_soon(log.append, "went on")
    with caplog.at_level(logging.ERROR, logger="tinyloop"):
        loop.run_once()
    assert log == ["went on"]
    assert "Unhandled error in exception handler" in caplog.text
    assert "the handler broke" in caplog.text


class _Holder:
    """What a failed callback's argument can be: an object that keeps the error (as a future does)."""

    error: BaseException | None = None


class _CallbackInstrument:
    def before_callback(self, handle: Handle) -> None:
        pass


@pytest.mark.parametrize("mode", ["plain", "debug", "instrument"])
def test_a_failed_callback_leaves_no_reference_cycle(selector: FakeSelector, clock: VirtualClock,
                                                      mode: str) -> None:
    """The error's traceback reaches, through its frames and their f_back, the
    frames that ran the handle; if they still hold the handle, whose argument
    holds the error, only the cyclic GC frees them (Python 3.12+).  With the
    GC off, dropping our reference must free the argument."""
    loop = Loop(selector=selector, clock=clock, debug=mode == "debug")
    if mode == "instrument":
        loop.add_instrument(_CallbackInstrument())
    holder = _Holder()
    alive = weakref.ref(holder)

    def keep_the_error(lp: Loop, context: dict) -> None:
        kept = alive()
        assert kept is not None
        kept.error = context["exception"]

    def fail(holder: _Holder) -> None:
        del holder  # only the handle holds it now
        raise ValueError("boom")

    loop.set_exception_handler(keep_the_error)
    enabled = gc.isenabled()
    gc.disable()
    try:
        loop.call_soon(fail, holder)
        loop.run_once()
        assert holder.error is not None
        del holder
        assert alive() is None, [type(r).__name__ for r in gc.get_referrers(alive())]
    finally:
        if enabled:
            gc.enable()
        loop.close()


def test_keyboard_interrupt_leaves_run_forever(loop: Loop) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    loop.call_soon(interrupt)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    assert not loop.is_running()


# -- debug mode -----------------------------------------------------------------------


def test_debug_mode_names_a_slow_callback(selector: FakeSelector, clock: VirtualClock,
                                          caplog: pytest.LogCaptureFixture) -> None:
    loop = Loop(selector=selector, clock=clock, debug=True, slow_callback_duration=0.1)

    def slow_callback() -> None:
        clock.advance(0.25)  # as if it computed for 250 ms

    loop.call_soon(slow_callback)
    loop.call_soon(lambda: clock.advance(0.05))
    with caplog.at_level(logging.WARNING, logger="tinyloop"):
        loop.run_once()
    loop.close()
    [record] = caplog.records
    assert "slow_callback" in record.getMessage() and "0.250 seconds" in record.getMessage()


def test_debug_mode_follows_the_environment_unless_told(monkeypatch: pytest.MonkeyPatch,
                                                        selector: FakeSelector, clock: VirtualClock) -> None:
    from tinyloop.callbacks.loop import DEBUG_ENV
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert Loop(selector=selector, clock=clock).get_debug()
    assert not Loop(selector=FakeSelector(clock), clock=clock, debug=False).get_debug()
    monkeypatch.setenv(DEBUG_ENV, "")
    assert not Loop(selector=FakeSelector(clock), clock=clock).get_debug()


def test_debug_mode_refuses_call_soon_from_another_thread() -> None:
    loop = Loop(debug=True)
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            loop.call_soon(lambda: None)
        except RuntimeError as error:
            errors.append(error)
        loop.call_soon_threadsafe(loop.stop)

    loop.call_soon(lambda: threading.Thread(target=other_thread).start())
    loop.run_forever()
    loop.close()
    assert len(errors) == 1 and "call_soon_threadsafe" in str(errors[0])


# -- the self-pipe and threads ----------------------------------------------------------


def test_call_soon_threadsafe_wakes_a_loop_blocked_in_select() -> None:
    loop = Loop()  # a real selector and clock: the loop really blocks with no timeout
    log: list[str] = []
    timer = threading.Timer(0.05, lambda: loop.call_soon_threadsafe(lambda: (log.append("woken"), loop.stop())))
    timer.start()
    try:
        loop.run_forever()
    finally:
        timer.join()
        loop.close()
    assert log == ["woken"]


def test_the_self_pipe_is_drained(loop: Loop, selector: FakeSelector) -> None:
    for _ in range(100):
        loop.call_soon_threadsafe(lambda: None)
    selector.set_ready(loop._ssock, once=True)
    loop.run_once()
    with pytest.raises(BlockingIOError):
        loop._ssock.recv(1)


# -- life cycle -------------------------------------------------------------------------


def test_stop_ends_run_forever_after_the_current_iteration(loop: Loop) -> None:
    log: list[str] = []
    loop.call_soon(loop.stop)
    loop.call_soon(log.append, "same iteration")
    loop.call_later(1, log.append, "later")
    loop.run_forever()
    assert log == ["same iteration"]
    assert not loop.is_running()


def test_stop_before_run_forever_runs_one_iteration(loop: Loop) -> None:
    log: list[str] = []
    loop.call_soon(log.append, "ran")
    loop.stop()
    loop.run_forever()
    assert log == ["ran"]


def test_get_running_loop_inside_and_outside(loop: Loop) -> None:
    seen: list[Loop] = []
    loop.call_soon(lambda: seen.append(get_running_loop()))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == [loop]
    with pytest.raises(RuntimeError, match="no running event loop"):
        get_running_loop()


def test_run_forever_is_not_reentrant(loop: Loop) -> None:
    errors: list[BaseException] = []

    def nested() -> None:
        try:
            loop.run_forever()
        except RuntimeError as error:
            errors.append(error)
        loop.stop()

    loop.call_soon(nested)
    loop.run_forever()
    assert len(errors) == 1 and loop.is_running() is False


def test_close_releases_everything_and_is_idempotent(selector: FakeSelector, clock: VirtualClock) -> None:
    loop = Loop(selector=selector, clock=clock)
    ssock, csock = loop._ssock, loop._csock
    loop.call_soon(lambda: None)
    loop.call_later(1, lambda: None)
    loop.close()
    loop.close()
    assert loop.is_closed() and selector.closed
    assert ssock.fileno() == -1 and csock.fileno() == -1
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(lambda: None)
    with pytest.raises(RuntimeError, match="closed"):
        loop.run_forever()
    assert loop.remove_reader(0) is False


def test_close_refuses_while_running(loop: Loop) -> None:
    errors: list[BaseException] = []

    def try_close() -> None:
        try:
            loop.close()
        except RuntimeError as error:
            errors.append(error)
        loop.stop()

    loop.call_soon(try_close)
    loop.run_forever()
    assert len(errors) == 1 and not loop.is_closed()


def test_callbacks_must_be_callable(loop: Loop, pair: tuple[socket.socket, socket.socket]) -> None:
    with pytest.raises(TypeError):
        loop.call_soon("not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        loop.call_later(1, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        loop.add_reader(pair[0], 42)  # type: ignore[arg-type]


def test_handles_say_what_they_will_call(loop: Loop) -> None:
    handle = loop.call_soon(print, "hello")
    assert isinstance(handle, Handle)
    assert repr(handle) == "<Handle print('hello')>"
    timer = loop.call_at(123.5, print)
    assert "print()" in repr(timer) and "when=123.5" in repr(timer)
