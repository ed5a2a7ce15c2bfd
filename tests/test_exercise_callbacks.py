# tests/test_exercise_callbacks.py
#
# The callbacks chapter's exercises (timer-heap, run-once), each behaviour
# said in the exercise's words; the checker runs these first (tests named
# test_<exercise>_...).  A Loop on a virtual clock and a scripted selector
# (tests/fakes.py): time moves only when the test says.

from __future__ import annotations

import heapq

import pytest
from fakes import VirtualClock

from tinyloop.callbacks.loop import CLOCK_RESOLUTION, Loop, TimerHandle


# The fixtures clock and loop are tests/conftest.py's.


# --- timer-heap -----------------------------------------------------------------------

def test_timer_heap_call_at_pushes_a_timer_handle_on_the_heap(loop: Loop) -> None:
    timer = loop.call_at(105.0, print)
    assert isinstance(timer, TimerHandle), (
        f"call_at must return the TimerHandle it made; yours returned {timer!r}")
    assert loop._scheduled == [timer], (
        f"call_at must push the timer on self._scheduled; the heap holds {loop._scheduled!r}")
    assert timer._in_heap is True, "call_at must mark the timer _in_heap = True"
    assert timer.when() == 105.0, f"the timer must be due at `when` (105.0); it says {timer.when()!r}"


def test_timer_heap_the_heap_orders_by_deadline(loop: Loop) -> None:
    late, early, middle = loop.call_at(130.0, print), loop.call_at(110.0, print), loop.call_at(120.0, print)
    assert loop._scheduled[0] is early, (
        "self._scheduled must be a heap (heapq.heappush): its first item is the earliest timer; "
        f"it is the one due at {loop._scheduled[0].when()}")
    order = [heapq.heappop(loop._scheduled) for _ in range(3)]
    assert order == [early, middle, late], "popping the heap must give the timers by deadline"


def test_timer_heap_equal_deadlines_run_in_the_order_they_were_set(loop: Loop, clock: VirtualClock) -> None:
    ran: list[int] = []
    for n in range(5):
        loop.call_at(101.0, ran.append, n)
    sequences = [t._sequence for t in sorted(loop._scheduled)]
    assert len(set(sequences)) == 5, (
        "each timer needs the next number of self._sequence (ties between equal deadlines are "
        f"broken by it); the five timers got {sequences}")
    clock.advance(1.0)
    loop.run_once()
    assert ran == [0, 1, 2, 3, 4], (
        f"timers due at the same time must run in the order they were set; they ran as {ran}")


def test_timer_heap_due_timers_move_to_the_ready_queue(loop: Loop, clock: VirtualClock) -> None:
    due, not_yet = loop.call_at(101.0, print), loop.call_at(103.0, print)
    clock.advance(1.0)
    loop._move_due_timers()
    assert list(loop._ready) == [due], (
        "_move_due_timers must append every timer whose `when` is at or before now to self._ready, "
        f"and no other; the ready queue holds {list(loop._ready)!r}")
    assert loop._scheduled == [not_yet], (
        f"and pop it off the heap; the heap holds {loop._scheduled!r}")
    assert due._in_heap is False, "a timer popped off the heap must be marked _in_heap = False"
    assert not_yet._in_heap is True, "a timer still on the heap stays _in_heap"


def test_timer_heap_a_timer_due_within_the_clock_resolution_is_due(loop: Loop, clock: VirtualClock) -> None:
    timer = loop.call_at(100.0 + CLOCK_RESOLUTION / 2, print)
    loop._move_due_timers()
    assert list(loop._ready) == [timer], (
        "a timer due before now + CLOCK_RESOLUTION counts as due (the clock cannot tell them apart); "
        f"the ready queue holds {list(loop._ready)!r}")


def test_timer_heap_a_timer_exactly_due_is_due(loop: Loop, clock: VirtualClock) -> None:
    timer = loop.call_at(100.0 + CLOCK_RESOLUTION, print)
    loop._move_due_timers()
    assert list(loop._ready) == [timer], (
        f"a timer whose `when` is exactly now + CLOCK_RESOLUTION is due ('at or before'); "
        f"the ready queue holds {list(loop._ready)!r}")


def test_timer_heap_a_cancelled_timer_is_dropped_and_counted(loop: Loop, clock: VirtualClock) -> None:
    keep = loop.call_at(101.0, print)
    drop = loop.call_at(100.5, print)
    drop.cancel()
    before = loop._cancelled_timers
    assert before == 1, f"test set-up: one cancelled timer is counted ({before})"
    clock.advance(2.0)
    loop._move_due_timers()
    assert list(loop._ready) == [keep], (
        "a cancelled timer popped off the heap must be dropped, not queued; "
        f"the ready queue holds {list(loop._ready)!r}")
    assert loop._cancelled_timers == before - 1, (
        "dropping a cancelled timer must count one less in self._cancelled_timers; "
        f"it went from {before} to {loop._cancelled_timers}")
    assert drop._in_heap is False, "a dropped timer is no longer _in_heap"


def test_timer_heap_timers_not_due_stay(loop: Loop) -> None:
    timer = loop.call_at(150.0, print)
    loop._move_due_timers()
    assert not loop._ready and loop._scheduled == [timer], (
        "a timer not yet due must stay on the heap and out of the ready queue")


# --- run-once ------------------------------------------------------------------------------

def test_run_once_runs_exactly_the_callbacks_ready_now(loop: Loop) -> None:
    ran: list[str] = []

    def first() -> None:
        ran.append("first")
        loop.call_soon(ran.append, "scheduled by first")

    loop.call_soon(first)
    loop.call_soon(ran.append, "second")
    loop.run_once()
    assert ran == ["first", "second"], (
        "run_once must run the handles in the ready queue when step 4 starts, and only those: "
        f"callbacks they schedule wait for the next iteration; it ran {ran}")
    loop.run_once()
    assert ran[-1] == "scheduled by first", "the next iteration runs what the first one scheduled"


def test_run_once_skips_a_cancelled_handle(loop: Loop) -> None:
    ran: list[str] = []
    errors: list[object] = []
    loop.set_exception_handler(lambda lp, context: errors.append(context.get("exception")))
    handle = loop.call_soon(ran.append, "cancelled")
    loop.call_soon(ran.append, "live")
    handle.cancel()
    loop.run_once()
    assert ran == ["live"], f"run_once must not run a cancelled handle; it ran {ran}"
    # cancel() drops the callback, so running the handle anyway fails inside
    # it (calling None), and the loop reports that to its exception handler.
    assert not errors, (f"run_once must skip a cancelled handle (if not handle._cancelled), not "
                        f"run it: running it reported {errors}")
    assert not loop._ready, "a cancelled handle is still popped off the ready queue"


def test_run_once_waits_for_the_next_timer_and_runs_it(loop: Loop, clock: VirtualClock) -> None:
    ran: list[float] = []
    loop.call_later(2.5, lambda: ran.append(clock()))
    loop.run_once()
    assert ran == [102.5], (
        "with nothing ready, run_once must wait (select with the timeout from "
        "_compute_timeout()) until the next timer, then move it to the ready queue and run it; "
        f"it ran at {ran}")


def test_run_once_runs_ready_io_callbacks(loop: Loop) -> None:
    import socket
    a, b = socket.socketpair()
    try:
        ran: list[str] = []
        loop.add_reader(a, ran.append, "readable")
        loop._selector.set_ready(a, 1)  # type: ignore[attr-defined]
        loop.run_once()
        assert ran == ["readable"], (
            "run_once must queue the callbacks of the ready descriptors (self._process_events) "
            f"and run them in the same iteration; it ran {ran}")
    finally:
        loop.remove_reader(a)
        a.close()
        b.close()


def test_run_once_io_callbacks_run_before_due_timers(loop: Loop, clock: VirtualClock) -> None:
    import socket
    a, b = socket.socketpair()
    try:
        ran: list[str] = []
        loop.call_at(100.0, ran.append, "timer")
        loop.add_reader(a, ran.append, "io")
        loop._selector.set_ready(a, 1)  # type: ignore[attr-defined]
        loop.run_once()
        assert ran == ["io", "timer"], (
            "step 3 queues the ready descriptors' callbacks first, then the due timers "
            f"(_process_events, then _move_due_timers); they ran as {ran}")
    finally:
        loop.remove_reader(a)
        a.close()
        b.close()


# --- callback-interest ------------------------------------------------------------------

class RecordingLoop:
    """The four interest calls Client._update makes, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def add_reader(self, fd: int, callback, *args) -> None:
        self.calls.append(("add_reader", fd, getattr(callback, "__name__", callback)))

    def remove_reader(self, fd: int) -> bool:
        self.calls.append(("remove_reader", fd))
        return True

    def add_writer(self, fd: int, callback, *args) -> None:
        self.calls.append(("add_writer", fd, getattr(callback, "__name__", callback)))

    def remove_writer(self, fd: int) -> bool:
        self.calls.append(("remove_writer", fd))
        return True

    def time(self) -> float:
        return 0.0


class Wanting:
    """A connection that wants what the test says."""

    def __init__(self, read: bool, write: bool, done: bool = False) -> None:
        self.fd, self.wants_read, self.wants_write, self.done = 7, read, write, done
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Server:
    def __init__(self) -> None:
        self.clients: set = set()


def client_with(conn: Wanting, reading: bool, writing: bool):
    from tinyloop.callbacks.server import Client
    client = Client.__new__(Client)  # the fields _update uses, without a socket
    client.server, client.loop, client.conn = Server(), RecordingLoop(), conn
    client.reading, client.writing, client.idle_timer, client.last_active = reading, writing, None, 0.0
    client.server.clients.add(client)
    return client


@pytest.mark.parametrize("read, write", [(True, False), (False, True), (True, True), (False, False)])
def test_callback_interest_nothing_changed_makes_no_call(read: bool, write: bool) -> None:
    client = client_with(Wanting(read, write), reading=read, writing=write)
    client._update()
    assert client.loop.calls == [], (
        "when the connection wants what is registered already, _update must make no call (each is a "
        f"system call); yours made {client.loop.calls}")


def test_callback_interest_starts_reading() -> None:
    client = client_with(Wanting(True, False), reading=False, writing=False)
    client._update()
    assert client.loop.calls == [("add_reader", 7, "_on_readable")], (
        "when conn.wants_read becomes True, _update must add the reader self._on_readable for "
        f"conn.fd; yours made {client.loop.calls}")
    assert client.reading is True, "and remember it: self.reading = True"


def test_callback_interest_stops_reading() -> None:
    client = client_with(Wanting(False, False), reading=True, writing=False)
    client._update()
    assert client.loop.calls == [("remove_reader", 7)], (
        f"when conn.wants_read becomes False, _update must remove the reader; yours made {client.loop.calls}")
    assert client.reading is False, "and remember it: self.reading = False"


def test_callback_interest_starts_writing() -> None:
    client = client_with(Wanting(True, True), reading=True, writing=False)
    client._update()
    assert client.loop.calls == [("add_writer", 7, "_on_writable")], (
        "when conn.wants_write becomes True, _update must add the writer self._on_writable for "
        f"conn.fd; yours made {client.loop.calls}")
    assert client.writing is True, "and remember it: self.writing = True"


def test_callback_interest_stops_writing() -> None:
    client = client_with(Wanting(True, False), reading=True, writing=True)
    client._update()
    assert client.loop.calls == [("remove_writer", 7)], (
        "when conn.wants_write becomes False (the output is sent), _update must remove the writer, "
        f"or the loop spins on a writable socket; yours made {client.loop.calls}")
    assert client.writing is False, "and remember it: self.writing = False"


def test_callback_interest_both_change_at_once() -> None:
    client = client_with(Wanting(False, True), reading=True, writing=False)
    client._update()
    assert client.loop.calls == [("remove_reader", 7), ("add_writer", 7, "_on_writable")], (
        f"both may change in one call; yours made {client.loop.calls}")
    assert (client.reading, client.writing) == (False, True), "and both are remembered"


def test_callback_interest_a_done_connection_is_closed() -> None:
    conn = Wanting(True, True, done=True)
    client = client_with(conn, reading=True, writing=True)
    client._update()
    assert conn.closed, "when self.conn.done, _update must close the client (which closes the connection)"
    assert client not in client.server.clients, "the closed client must leave the server's clients"
    assert ("add_reader", 7, "_on_readable") not in client.loop.calls and \
        ("add_writer", 7, "_on_writable") not in client.loop.calls, (
            f"and return: no interest for a closed connection; the calls were {client.loop.calls}")
