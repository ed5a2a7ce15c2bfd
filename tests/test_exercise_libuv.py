# tests/test_exercise_libuv.py
#
# The libuv chapter's exercises (uv-timer-heap, uv-ready-queue,
# uv-write-batch), each behaviour checked on its own and said in the
# exercise's words.  The checker builds tinyloop.uv._loop with the student's
# .pyx file and runs these first, on that build (TINYLOOP_OVERRIDE names the
# built module; tests/conftest.py applies it), before the conformance suite's
# uv row and the HTTP suite on the uv stages.
#
# Rules this file keeps:
#   * A test is named test_<exercise with _>_..., which is how the checker
#     selects an exercise's tests (checker.test_arguments).
#   * Every assertion carries a message: what the exercise asks, what was
#     expected, what happened.
#   * Every test drives a real tinyloop.uv loop on 127.0.0.1, and stops by
#     itself: a watchdog thread stops the loop (through uv_async, which
#     needs neither the timers nor the ready queue the student wrote) when
#     a test waits too long, so a timer that never fires fails in seconds.
#     Only a solution that never returns to libuv at all (a ready queue run
#     until it is empty, forever) is left to the checker's per-test limit.
#   * Time is real here (libuv keeps it): tests assert order, and "before"
#     or "not before" a deadline, never how long something took, except the
#     one measure of a spinning loop (CPU time against wall time, with a
#     wide margin).

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import signal
import socket
import threading
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

uv = pytest.importorskip("tinyloop.uv.loop", reason="tinyloop.uv is not built here (see the README)")

# Seconds a test may wait for what it expects before the watchdog stops it.
PATIENCE = 5.0


class Harness:
    """A tinyloop.uv loop, the errors its exception handler received (``contexts``),
    and a way to run it until a condition holds, with a watchdog."""

    def __init__(self) -> None:
        self.loop = uv.new_event_loop()
        self.contexts: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda loop, context: self.contexts.append(context))

    def run_until(self, done: Callable[[], bool], what: str, patience: float = PATIENCE) -> None:
        """Run the loop until ``done()`` is true; AssertionError saying ``what`` was
        awaited when it is not after ``patience`` seconds.

        A thread asks ``done()`` every millisecond and stops the loop with
        call_soon_threadsafe: a wake-up through uv_async, which works while
        the timers under test do not, and adds no callback to the loop's
        thread while it waits.
        """
        loop = self.loop
        returned = threading.Event()
        timed_out = threading.Event()

        def watch() -> None:
            deadline = time.monotonic() + patience
            while not returned.is_set() and not done():
                if time.monotonic() > deadline:
                    timed_out.set()
                    break
                time.sleep(0.001)
            if not returned.is_set():
                loop.call_soon_threadsafe(loop.stop)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            loop.run_forever()
        finally:
            returned.set()
            watcher.join()
        assert not timed_out.is_set(), \
            f"after {patience:g} s the loop was still waiting: {what}{self.errors()}"
        assert done(), f"the loop stopped before {what}{self.errors()}"

    def errors(self) -> str:
        """What the loop reported, for a message: '' when it reported nothing."""
        if not self.contexts:
            return ""
        return "; the loop reported " + "; ".join(
            f"{c.get('message')!s}: {c.get('exception')!r}" for c in self.contexts)

    def close(self) -> None:
        self.loop.close()


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


def idle_cpu_share(h: Harness, seconds: float) -> float:
    """Run ``h``'s loop ``seconds`` with one far timer and nothing else to do; return
    the CPU time this thread used as a share of the wall time."""
    fired: list[bool] = []
    h.loop.call_later(seconds, fired.append, True)
    wall, cpu = time.monotonic(), time.thread_time()
    h.run_until(lambda: bool(fired), f"a timer due in {seconds:g} s ran")
    return (time.thread_time() - cpu) / (time.monotonic() - wall)


# --- uv-timer-heap ------------------------------------------------------------------

def test_uv_timer_heap_timers_run_in_deadline_order_and_never_early(h):
    rng = random.Random(9)
    # Ties on purpose (the same delay twice runs first-scheduled first),
    # and deadlines between two milliseconds (libuv counts whole ones).
    delays = [round(rng.uniform(0.0, 0.06), 4) for _ in range(40)] + [0.02, 0.02, 0.0]
    ran: list[tuple[int, float]] = []
    when = {}
    for index, delay in enumerate(delays):
        timer = h.loop.call_later(delay, lambda i=index: ran.append((i, h.loop.time())))
        when[index] = timer.when()
    h.run_until(lambda: len(ran) == len(delays), f"all {len(delays)} timers ran "
                f"(ran: {len(ran)})")
    order = [i for i, _ in ran]
    expected = sorted(range(len(delays)), key=lambda i: (when[i], i))
    assert order == expected, (
        "timers must run in deadline order, ties in the order they were scheduled; "
        f"expected {expected[:8]}..., ran {order[:8]}...")
    early = [(i, when[i] - at) for i, at in ran if at < when[i]]
    assert not early, ("a timer must not run before its deadline on loop.time(); "
                       f"timer {early[0][0]} ran {early[0][1] * 1000:.3f} ms early")


def test_uv_timer_heap_a_nearer_timer_rearms_the_uv_timer(h):
    ran: list[str] = []
    h.loop.call_later(3.0, ran.append, "far")
    h.loop.call_later(0.02, ran.append, "near")
    start = time.monotonic()
    h.run_until(lambda: "near" in ran, "a 20 ms timer scheduled after a 3 s one ran",
                patience=2.0)
    assert time.monotonic() - start < 1.5, (
        "a timer earlier than the armed deadline must re-arm the uv_timer_t; "
        "the 20 ms timer waited for the 3 s one")
    assert ran == ["near"], f"only the 20 ms timer was due; ran {ran}"


def test_uv_timer_heap_timers_due_between_milliseconds_all_run(h):
    # libuv's clock for timers counts whole milliseconds, so when I/O wakes
    # the loop (here: a byte every 0.2 ms), the uv_timer_t may fire up to a
    # millisecond before a deadline on loop.time().  Then nothing is due,
    # and _fire_timers must arm the timer again, for that same deadline.
    a, b = socket.socketpair()
    a.setblocking(False)
    h.loop.add_reader(a.fileno(), lambda: a.recv(65536))
    ran: list[int] = []
    stop = threading.Event()

    def wake() -> None:
        while not stop.wait(0.0002):
            try:
                b.send(b"x")
            except OSError:
                return

    for k in range(60):
        h.loop.call_later(0.0004 + k * 0.00137, ran.append, k)
    waker = threading.Thread(target=wake, daemon=True)
    waker.start()
    try:
        h.run_until(lambda: len(ran) == 60, "all 60 timers ran while I/O woke the loop "
                    f"between their deadlines (ran: {len(ran)}; is the timer armed again "
                    "when it fired and nothing was due yet?)")
    finally:
        stop.set()
        waker.join()
        h.loop.remove_reader(a.fileno())
        a.close()
        b.close()
    assert ran == list(range(60)), f"timers must run in deadline order; ran {ran}"


def test_uv_timer_heap_cancelled_timers_never_run_and_others_still_do(h):
    ran: list[str] = []
    first = h.loop.call_later(0.005, ran.append, "cancelled first")
    h.loop.call_later(0.03, ran.append, "live")
    # Enough cancelled timers to make the heap compact itself, too.
    many = [h.loop.call_later(0.01 + i * 1e-5, ran.append, "cancelled") for i in range(150)]
    first.cancel()
    for timer in many:
        timer.cancel()
    h.run_until(lambda: "live" in ran, "the one live timer ran, behind cancelled ones")
    assert ran == ["live"], f"a cancelled timer must never run; ran {sorted(set(ran))}"
    counts = h.loop._debug_counts()
    assert counts["timers"] == 0, (
        "after every timer ran or was dropped, the heap must hold no live timer "
        f"(count cancelled timers out as you pop them); _debug_counts() says {counts}")


def test_uv_timer_heap_a_cancelled_timer_popped_before_arming_leaves_the_count_right(h):
    # Too few cancelled timers to compact the heap: after the live timer
    # fires, _arm_timer finds the cancelled one on top, pops it itself, and
    # must take it off the count of cancelled entries, or the heap reports
    # fewer live timers than it holds.
    ran: list[str] = []
    h.loop.call_later(0.02, ran.append, "live")
    cancelled = h.loop.call_later(0.5, ran.append, "cancelled")
    later = h.loop.call_later(60, ran.append, "later")
    cancelled.cancel()
    h.run_until(lambda: "live" in ran, "the live timer ran")
    counts = h.loop._debug_counts()
    later.cancel()
    assert ran == ["live"] and counts["timers"] == 1, (
        "one timer is still waiting (60 s away); popping a cancelled timer in _arm_timer "
        f"must count it out of _timers_cancelled; ran {ran}, _debug_counts() says {counts}")


def test_uv_timer_heap_many_timers_due_at_once_run_in_one_go(h):
    ran: list[int] = []
    when = h.loop.time() + 0.01
    for i in range(1000):
        h.loop.call_at(when, ran.append, i)
    h.run_until(lambda: len(ran) == 1000, f"1000 timers due at the same time ran "
                f"(ran: {len(ran)})")
    assert ran == list(range(1000)), "timers with one deadline run in the order scheduled"
    assert h.loop._debug_counts()["timers"] == 0, h.loop._debug_counts()


def test_uv_timer_heap_a_fired_timer_is_let_go(h):
    class Target:
        def hit(self) -> None:
            hits.append(1)

    hits: list[int] = []
    target = Target()
    alive = weakref.ref(target)
    h.loop.call_later(0.005, target.hit)
    del target
    h.run_until(lambda: bool(hits), "the timer ran")
    h.run_until(lambda: True, "one more turn")  # the handle leaves the ready queue
    gc.collect()
    assert alive() is None, ("once a timer has run, neither the heap nor the loop may keep "
                             "its callback alive (a reference taken and never dropped?)")


def test_uv_timer_heap_a_loop_waiting_for_a_timer_does_not_spin(h):
    share = idle_cpu_share(h, 0.5)
    assert share < 0.5, (
        "while the only thing scheduled is a timer 0.5 s away, libuv must sleep in its "
        f"poll phase; this thread was on the CPU {share:.0%} of the time (a uv_timer_t "
        "armed for 0 ms, or re-armed in a loop?)")


def test_uv_timer_heap_timers_and_io_take_turns(h):
    # A timer that schedules the next one for "now" must not keep I/O out.
    a, b = socket.socketpair()
    got: list[bytes] = []
    h.loop.add_reader(a.fileno(), lambda: got.append(a.recv(100)))
    ticks = [0]

    def tick() -> None:
        ticks[0] += 1
        if ticks[0] < 100_000 and not got:
            h.loop.call_later(0, tick)

    h.loop.call_later(0, tick)
    b.send(b"x")
    try:
        h.run_until(lambda: bool(got), "a readable socket was read while a timer "
                    "rescheduled itself")
    finally:
        h.loop.remove_reader(a.fileno())
        a.close()
        b.close()
    assert ticks[0] < 1000, (f"the socket was read only after {ticks[0]} timer callbacks: "
                             "each uv_timer_t callback must move only the due timers, "
                             "then let libuv poll")


# --- uv-ready-queue ------------------------------------------------------------------

def test_uv_ready_queue_callbacks_run_in_order_and_cancelled_ones_do_not(h):
    ran: list[str] = []
    h.loop.call_soon(ran.append, "a")
    h.loop.call_soon(ran.append, "cancelled").cancel()
    h.loop.call_soon(ran.append, "b")
    h.loop.call_soon(ran.append, "c")
    h.run_until(lambda: len(ran) >= 3, "three callbacks ran")
    assert ran == ["a", "b", "c"], (f"call_soon callbacks run first in, first out, and a "
                                    f"cancelled one never; ran {ran}")
    assert not h.contexts, f"nothing should be reported{h.errors()}"


def test_uv_ready_queue_what_a_callback_schedules_waits_for_the_next_iteration(h):
    steps = [0]
    seen: dict[str, int] = {}
    a, b = socket.socketpair()

    def step() -> None:
        steps[0] += 1
        if steps[0] == 1:
            h.loop.call_at(h.loop.time(), lambda: seen.setdefault("timer", steps[0]))
            h.loop.add_reader(a.fileno(), lambda: seen.setdefault("socket", steps[0]))
            b.send(b"x")
        if steps[0] < 5000 and len(seen) < 2:
            h.loop.call_soon(step)

    h.loop.call_soon(step)
    try:
        h.run_until(lambda: len(seen) == 2, "a due timer and a readable socket ran while "
                    "a callback kept scheduling itself")
    finally:
        h.loop.remove_reader(a.fileno())
        a.close()
        b.close()
    assert seen["timer"] < 50 and seen["socket"] < 50, (
        "run only the callbacks that were ready when _run_ready started: what they "
        "schedule waits for the next iteration, so timers and I/O get their turn; the "
        f"timer ran after step {seen['timer']}, the socket after step {seen['socket']} "
        "of a callback that rescheduled itself")


def test_uv_ready_queue_stop_ends_run_forever_after_the_current_callbacks(h):
    ran: list[str] = []

    def first() -> None:
        ran.append("first")
        h.loop.call_soon(ran.append, "later")
        h.loop.stop()

    h.loop.call_soon(first)
    h.loop.call_soon(ran.append, "second")
    watchdog = threading.Timer(PATIENCE, lambda: h.loop.call_soon_threadsafe(h.loop.stop))
    watchdog.start()
    try:
        h.loop.run_forever()
    finally:
        watchdog.cancel()
    assert ran == ["first", "second"], (
        "stop() ends run_forever once the callbacks ready at the time have run (call "
        f"uv_stop when self._stopping); ran {ran}")
    h.run_until(lambda: "later" in ran, "the callback left over ran in the next run")


def test_uv_ready_queue_an_idle_loop_does_not_spin(h):
    for _ in range(10):
        h.loop.call_soon(lambda: None)
    share = idle_cpu_share(h, 0.5)
    assert share < 0.5, (
        "once the ready queue is empty the idle handle must stop (uv_idle_stop), or "
        f"libuv never blocks; this thread was on the CPU {share:.0%} of 0.5 s with "
        "nothing to do")


def test_uv_ready_queue_debug_mode_names_a_slow_callback(h, caplog):
    h.loop.set_debug(True)
    h.loop.slow_callback_duration = 0.01
    done: list[bool] = []

    def slow() -> None:
        time.sleep(0.03)
        done.append(True)

    with caplog.at_level(logging.WARNING):
        h.loop.call_soon(slow)
        h.run_until(lambda: bool(done), "the slow callback ran")
    assert any("took" in record.getMessage() for record in caplog.records), (
        "in debug mode a callback runs through self._run_handle, which logs one that "
        f"takes longer than slow_callback_duration; logged {[r.getMessage() for r in caplog.records]}")


def test_uv_ready_queue_a_signal_handler_runs(h):
    # Part III's signal handling queues its own (Python) Handle.
    got: list[str] = []
    h.loop.add_signal_handler(signal.SIGUSR1, got.append, "signal")
    try:
        h.loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        h.run_until(lambda: bool(got), "the SIGUSR1 handler ran")
    finally:
        h.loop.remove_signal_handler(signal.SIGUSR1)
    assert got == ["signal"]
    assert not h.contexts, f"nothing should be reported{h.errors()}"


def test_uv_ready_queue_a_cancelled_python_handle_does_not_run(h):
    # Part III's own handles (asyncio.Handle: signal handlers queue them) take
    # the ready queue's other branch, which must skip a cancelled one too.
    ran: list[str] = []
    handle = asyncio.Handle(ran.append, ("cancelled",), h.loop)
    handle.cancel()
    h.loop._ready.append(handle)
    h.loop.call_soon(ran.append, "after")
    h.run_until(lambda: "after" in ran, "the callback after the cancelled handle ran")
    assert ran == ["after"] and not h.contexts, (
        "a cancelled handle never runs, whatever its class (a Part III handle is not a "
        f"Handle or TimerHandle: check its _cancelled too); ran {ran}{h.errors()}")


def test_uv_ready_queue_an_exception_goes_to_the_handler_and_the_loop_goes_on(h):
    ran: list[str] = []
    h.loop.call_soon(lambda: 1 / 0)
    h.loop.call_soon(ran.append, "after")
    h.run_until(lambda: bool(ran), "the callback after a failing one ran")
    assert any(isinstance(c.get("exception"), ZeroDivisionError) for c in h.contexts), (
        f"a callback's exception goes to the loop's exception handler{h.errors() or ''}")


# --- uv-write-batch ------------------------------------------------------------------

class Peer:
    """The other end of a TCP connection, read to EOF by a thread (``data``,
    ``eof``), starting only when ``start()`` is called."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = bytearray()
        self.eof = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _read(self) -> None:
        self.sock.settimeout(PATIENCE * 2)
        try:
            while chunk := self.sock.recv(1 << 20):
                self.data += chunk
        except OSError:
            pass
        self.eof.set()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(PATIENCE) if self.thread.is_alive() else None


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.events: list[str] = []
        self.received = bytearray()
        self.lost: list[BaseException | None] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += data

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.append(exc)


@pytest.fixture
def connection(h) -> Iterator[tuple[Recorder, Peer]]:
    """A TCP connection on 127.0.0.1: our end a uv_tcp transport with a Recorder,
    the other end a Peer (not reading until started)."""
    # Small kernel buffers, so that a few hundred KiB are more than the
    # kernel takes while the peer is not reading.
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        ours = socket.socket()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        ours.connect(listener.getsockname())
        theirs, _ = listener.accept()
    ours.setblocking(False)
    protocol = Recorder()
    h.loop.run_until_complete(h.loop.connect_accepted_socket(lambda: protocol, ours))
    assert type(protocol.transport).__name__ == "TCPTransport", protocol.transport
    peer = Peer(theirs)
    yield protocol, peer
    if protocol.transport is not None and not protocol.transport.is_closing():
        protocol.transport.abort()
        h.run_until(lambda: bool(protocol.lost), "connection_lost after abort()")
    peer.close()


def test_uv_write_batch_writes_wait_for_the_end_of_the_turn(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    sizes: list[int] = []

    def write_three() -> None:
        for _ in range(3):
            transport.write(b"x" * 100)
        sizes.append(transport.get_write_buffer_size())

    peer.start()
    h.loop.call_soon(write_three)
    h.run_until(lambda: len(peer.data) >= 300, "the peer received the 300 bytes written")
    assert sizes == [300], (
        "write() only queues: the bytes go out in one writev at the end of the turn, so "
        "right after three writes of 100 bytes get_write_buffer_size() is 300; it was "
        f"{sizes[0] if sizes else None}")
    assert transport.get_write_buffer_size() == 0, "after the turn nothing is left queued"


def test_uv_write_batch_every_byte_arrives_in_order(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    expected = bytearray()
    reused = bytearray(b"reused buffer ")

    def write_all() -> None:
        for i in range(40):  # more than 16 buffers in one batch
            chunk = b"%d," % i
            transport.write(chunk)
            expected.extend(chunk)
        transport.write(reused)
        expected.extend(reused)
        reused[:] = b"CHANGED AFTER"  # write() must have copied it
        transport.writelines([b"a", memoryview(b"bc")])
        expected.extend(b"abc")
        transport.close()

    peer.start()
    h.loop.call_soon(write_all)
    h.run_until(lambda: bool(protocol.lost), "connection_lost after close()")
    assert peer.eof.wait(PATIENCE), "after close() the peer must see the end of the stream"
    assert bytes(peer.data) == bytes(expected), (
        "the peer must receive every byte written, in order; expected "
        f"{bytes(expected[:40])!r}..., received {bytes(peer.data[:40])!r}...")
    assert protocol.lost == [None], f"connection_lost(None) exactly once; got {protocol.lost}"


def test_uv_write_batch_a_large_write_is_finished_by_uv_write(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    rng = random.Random(4)
    big = bytes(rng.getrandbits(8) for _ in range(1 << 16)) * 8   # 512 KiB
    small = [b"%06d" % i for i in range(1500)]   # more buffers than one writev takes
    expected = big + b"".join(small) + big[:1000]
    transport.write(big)
    transport.writelines(small)
    transport.write(big[:1000])
    # The peer is not reading yet: the kernel takes what fits, uv_write the rest.
    h.run_until(lambda: "pause" in protocol.events, "pause_writing() once more than the "
                "high-water mark was buffered")
    peer.start()
    h.run_until(lambda: len(peer.data) >= len(expected), f"the peer received all "
                f"{len(expected)} bytes (received {len(peer.data)})")
    assert bytes(peer.data) == expected, (
        "the part uv_try_write did not take must follow it exactly: the first "
        f"difference is at byte {next(i for i, (x, y) in enumerate(zip(peer.data, expected)) if x != y) if peer.data[:len(expected)] != expected[:len(peer.data)] else len(peer.data)} "
        f"of {len(expected)}")
    h.run_until(lambda: "resume" in protocol.events, "resume_writing() once the buffer drained")
    assert transport.get_write_buffer_size() == 0


def test_uv_write_batch_write_eof_follows_the_data_and_reading_goes_on(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    peer.start()

    def write_then_eof() -> None:
        transport.write(b"hello ")
        transport.write(b"world")
        transport.write_eof()

    h.loop.call_soon(write_then_eof)
    h.run_until(peer.eof.is_set, "the peer saw the end of our stream after write_eof()")
    assert bytes(peer.data) == b"hello world", (
        f"write_eof() shuts down only after everything written is sent; the peer got "
        f"{bytes(peer.data)!r}")
    peer.sock.sendall(b"still reading")
    h.run_until(lambda: bytes(protocol.received) == b"still reading",
                "our side still read after write_eof()")


def test_uv_write_batch_a_batch_the_kernel_takes_whole_resumes_a_paused_protocol(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    peer.start()

    def write_then_lower_the_mark() -> None:
        transport.write(b"x" * 90)                      # queued for the end of the turn
        transport.set_write_buffer_limits(high=50, low=10)  # now above the mark: paused

    h.loop.call_soon(write_then_lower_the_mark)
    h.run_until(lambda: len(peer.data) >= 90, "the peer received the 90 bytes")
    h.run_until(lambda: "resume" in protocol.events, "resume_writing() on the protocol "
                "paused by lower marks, once the kernel took the whole batch", patience=2.0)
    assert protocol.events == ["pause", "resume"], (
        "when uv_try_write takes the whole batch the buffer is empty: tell the transport "
        "(self._on_written(0)), which resumes a paused protocol and finishes a close; "
        f"the protocol saw {protocol.events}")


def test_uv_write_batch_a_write_above_the_high_water_mark_goes_out_at_once(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    transport.set_write_buffer_limits(high=4096, low=1024)
    peer.start()
    seen: list[tuple[int, list[str]]] = []

    def write_above_the_mark() -> None:
        transport.write(b"x" * 5000)
        seen.append((transport.get_write_buffer_size(), list(protocol.events)))

    h.loop.call_soon(write_above_the_mark)
    h.run_until(lambda: len(peer.data) >= 5000, "the peer received the 5000 bytes")
    assert seen == [(0, [])], (
        "a write that takes the pending bytes above the high-water mark is sent at once "
        "(self._flush()), which the kernel takes whole here: nothing stays buffered and the "
        f"protocol is never paused; right after write() the buffer held {seen[0][0]} bytes "
        f"and the protocol saw {seen[0][1]}")


def test_uv_write_batch_frees_the_uv_buf_t_array_of_a_large_batch(h, connection):
    protocol, peer = connection
    transport = protocol.transport
    turns, per_turn = 1500, 40   # more than the 16 uv_buf_t on the stack: a heap array
    done: list[int] = []

    def write_a_batch() -> None:
        for _ in range(per_turn):
            transport.write(b"x")
        done.append(1)
        if len(done) < turns:
            h.loop.call_soon(write_a_batch)

    peer.start()
    # Deep enough tracebacks that the peer thread's allocations (its 1 MiB
    # recv buffer) can be told apart by threading.py in their frames.
    tracemalloc.start(25)
    try:
        before = tracemalloc.take_snapshot()
        h.loop.call_soon(write_a_batch)
        h.run_until(lambda: len(peer.data) >= turns * per_turn, "the peer received every byte")
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    loop_thread = [tracemalloc.Filter(False, threading.__file__, all_frames=True)]
    grown = sum(stat.size_diff for stat in
                after.filter_traces(loop_thread).compare_to(before.filter_traces(loop_thread), "filename"))
    leaked = turns * per_turn * 16   # one uv_buf_t (16 bytes) per buffer, if never freed
    assert grown < leaked // 2, (
        f"memory grew by {grown} bytes over {turns} batches of {per_turn} buffers: the "
        "uv_buf_t array PyMem_RawMalloc gave a batch of more than 16 must be freed "
        "(PyMem_RawFree) on every way out of _flush")


# --- the Cython exercises' build step (tinyloop/exercises/build.py) ---------------------

@pytest.mark.slow  # runs Cython on the student's file (scripts/test.sh's slow step)
def test_a_cython_exercise_that_does_not_compile_names_the_line_of_the_students_file(tmp_path):
    from tinyloop.exercises import build, catalog, checker, markers
    exercise = catalog.get("uv-ready-queue")
    try:
        text = markers.starter(exercise)
    except markers.MarkerError as error:
        pytest.skip(f"the reference has no region of {exercise.name} yet: {error}")
    line = markers.unwritten_lines(text, exercise.name)[0]
    lines = text.splitlines()
    lines[line - 1] = lines[line - 1].replace(markers.placeholder(exercise.name),
                                              "undeclared_name_here += 1")
    student = tmp_path / f"{exercise.name}.pyx"
    student.write_text("\n".join(lines) + "\n")
    made = build.build(exercise, student, checker.repository_root())
    assert made.module is None, "a file that does not compile must not build"
    assert any(f"line {line} of your file" in error and "undeclared_name_here" in error
               for error in made.errors), made.errors
