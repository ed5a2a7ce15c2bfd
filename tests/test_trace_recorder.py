"""The instrument protocol and the recorder on Part II's loops (tinyloop/trace/).

Every loop here runs on the virtual clock and scripted selector of
tests/fakes.py, so the recorded sequence of events is exact: the tests spell
it out, event by event, as a reader would predict it from ``run_once``'s
four steps.  Every trace written is checked against the Trace Event Format
(tinyloop/trace/chrome.py, and the independent check below).
"""

from __future__ import annotations

import json
import logging
import math
import socket
from typing import Any

import pytest
from fakes import READ, FakeSelector, VirtualClock

from tinyloop.callbacks.loop import Loop
from tinyloop.coroutines import tasks
from tinyloop.coroutines.futures import Future
from tinyloop.generators.scheduler import Scheduler
from tinyloop.generators.traps import read_wait, sleep, spawn
from tinyloop.generators.yieldfrom import YieldFromScheduler
from tinyloop.trace import chrome
from tinyloop.trace.instrument import HOOKS, Instrument, InstrumentSet
from tinyloop.trace.recorder import Recorder, record


def fake_loop() -> tuple[Loop, VirtualClock, FakeSelector]:
    clock = VirtualClock()
    selector = FakeSelector(clock)
    return Loop(selector=selector, clock=clock), clock, selector


def validate(trace: Any) -> None:
    """An independent reading of the Trace Event Format, stricter than the writer's own check.

    Every event has a known phase, a string name, integer pid and tid; every
    event but metadata a finite ts >= 0 in microseconds; X a dur >= 0; C
    numeric series; M a thread/process name; B and E balance per thread.
    The document must survive a JSON round trip unchanged.
    """
    assert json.loads(json.dumps(trace)) == trace
    assert chrome.problems(trace) == []
    assert chrome.overlaps(trace) == [], "a thread's spans nest, as Perfetto draws them"
    events = trace["traceEvents"]
    open_spans: dict[tuple[int, int], int] = {}
    for event in events:
        assert event["ph"] in "BEXiCM", event
        assert isinstance(event["name"], str) and event["name"], event
        assert type(event["pid"]) is int and type(event["tid"]) is int, event
        if event["ph"] != "M":
            assert isinstance(event["ts"], (int, float)) and math.isfinite(event["ts"]) and event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] >= 0, event
        if event["ph"] == "C":
            assert event["args"] and all(isinstance(v, (int, float)) for v in event["args"].values())
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index"), event
        key = (event["pid"], event["tid"])
        if event["ph"] == "B":
            open_spans[key] = open_spans.get(key, 0) + 1
        if event["ph"] == "E":
            open_spans[key] -= 1
            assert open_spans[key] >= 0
    assert not any(open_spans.values())


def sequence(recorder: Recorder, *, counters: bool = False) -> list[tuple[Any, ...]]:
    """The recording, short: (ph, name, ts in ms, tid) per event, counters left out unless asked."""
    out = []
    for event in recorder.trace()["traceEvents"]:
        if event["ph"] == "M" or (event["ph"] == "C" and not counters):
            continue
        out.append((event["ph"], event["name"], event["ts"] / 1000, event["tid"]))
    return out


# -- the protocol ------------------------------------------------------------------------


def test_no_instrument_means_none_on_the_loop() -> None:
    loop, _, _ = fake_loop()
    assert loop._instrument is None
    instrument = Instrument()
    loop.add_instrument(instrument)
    assert isinstance(loop._instrument, InstrumentSet)
    assert loop.remove_instrument(instrument) is True
    assert loop._instrument is None, "with the last instrument gone, the hot path must test None again"
    assert loop.remove_instrument(instrument) is False
    loop.close()


def test_an_object_with_no_hook_is_refused() -> None:
    loop, _, _ = fake_loop()
    with pytest.raises(TypeError, match="none of the instrument hooks"):
        loop.add_instrument(object())
    loop.close()


def test_hooks_are_optional_and_called_in_order() -> None:
    loop, clock, _ = fake_loop()
    calls: list[tuple[str, Any]] = []

    class OnlyWaits:
        def before_io_wait(self, timeout: float | None) -> None:
            calls.append(("before_io_wait", timeout))

        def after_io_wait(self, events: int) -> None:
            calls.append(("after_io_wait", events))

    loop.add_instrument(OnlyWaits())
    loop.add_instrument(OnlyWaits())  # a second one: each hook twice
    loop.call_later(2.5, loop.stop)
    loop.run_forever()
    assert calls == [("before_io_wait", 2.5)] * 2 + [("after_io_wait", 0)] * 2
    loop.close()


def test_every_hook_of_the_protocol_is_documented() -> None:
    for hook in HOOKS:
        doc = getattr(Instrument, hook).__doc__
        assert doc and len(doc) > 30, f"Instrument.{hook} must say what it receives"
        assert hasattr(InstrumentSet, hook), f"InstrumentSet must dispatch {hook}"


def test_an_instrument_that_raises_is_removed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    loop, _, _ = fake_loop()
    ran: list[str] = []

    class Broken:
        def before_callback(self, handle: Any) -> None:
            raise ZeroDivisionError("instrument bug")

    good = Recorder(loop.time)
    loop.add_instrument(Broken())
    loop.add_instrument(good)
    loop.call_soon(ran.append, "first")
    loop.call_soon(ran.append, "second")
    loop.call_soon(loop.stop)
    with caplog.at_level(logging.ERROR, logger="tinyloop.trace"):
        loop.run_forever()
    assert ran == ["first", "second"], "an instrument's error must not stop the callbacks"
    assert "instrument bug" in caplog.text and "removed" in caplog.text
    assert loop._instrument is not None and loop._instrument.instruments == (good,)
    names = [e["name"] for e in good.trace()["traceEvents"] if e.get("cat") == "callback"]
    assert names == ["list.append", "list.append", "Loop.stop"], "the other instrument goes on"
    loop.close()


def test_keyboard_interrupt_from_an_instrument_passes() -> None:
    loop, _, _ = fake_loop()

    class CtrlC:
        def before_callback(self, handle: Any) -> None:
            raise KeyboardInterrupt

    loop.add_instrument(CtrlC())
    loop.call_soon(print)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    loop.close()


# -- exact sequences on the virtual clock ---------------------------------------------------


def test_callbacks_loop_one_iteration_at_a_time() -> None:
    loop, clock, selector = fake_loop()
    recorder = record(loop)
    a, b = socket.socketpair()
    try:
        def on_readable() -> None:
            loop.remove_reader(a)
            loop.call_soon(after_read)

        def after_read() -> None:
            loop.call_later(0.010, loop.stop)

        loop.add_reader(a, on_readable)
        loop.call_later(0.005, selector.set_ready, a, READ)
        loop.run_forever()
        assert sequence(recorder) == [
            # 1: nothing ready: wait 5 ms for the timer
            ("X", "wait", 0.0, 1), ("X", "timers", 5.0, 1),
            ("X", "FakeSelector.set_ready", 5.0, 1), ("X", "callbacks", 5.0, 1),
            # 2: no timer left: wait with no timeout; the socket is ready
            ("X", "wait", 5.0, 1), ("X", "timers", 5.0, 1),
            ("X", "on_readable", 5.0, 1), ("X", "callbacks", 5.0, 1),
            # 3: what it queued runs next iteration (timeout 0)
            ("X", "wait", 5.0, 1), ("X", "timers", 5.0, 1),
            ("X", "after_read", 5.0, 1), ("X", "callbacks", 5.0, 1),
            # 4: a 10 ms wait for the stop timer
            ("X", "wait", 5.0, 1), ("X", "timers", 15.0, 1),
            ("X", "Loop.stop", 15.0, 1), ("X", "callbacks", 15.0, 1),
            ("X", "run", 0.0, 1),
        ]
        waits = [e["args"] for e in recorder.events if e["name"] == "wait"]
        assert waits == [{"timeout": 0.005, "events": 0}, {"timeout": None, "events": 1},
                         {"timeout": 0, "events": 0}, {"timeout": pytest.approx(0.010), "events": 0}]
        timers = [e["args"]["due"] for e in recorder.events if e["name"] == "timers"]
        assert timers == [1, 0, 0, 1]
        counters = [(e["name"], e["args"]) for e in recorder.events if e["ph"] == "C"]
        assert counters[:2] == [("ready descriptors", {"events": 0}), ("ready queue", {"handles": 1})]
        assert ("ready descriptors", {"events": 1}) in counters
        validate(recorder.trace())
    finally:
        a.close()
        b.close()
        loop.close()


def generator_program() -> Any:
    def child() -> Any:
        yield sleep(0.002)
        return "done"

    def main() -> Any:
        yield spawn(child())
        yield sleep(0.005)

    return main


@pytest.mark.parametrize("cls", [Scheduler, YieldFromScheduler])
def test_generators_task_steps_and_traps(cls: type[Scheduler]) -> None:
    loop, clock, selector = fake_loop()
    recorder = record(loop)

    def child() -> Any:
        yield from sleep(0.002)
        return "done"

    def main() -> Any:
        yield from spawn(child())
        yield from sleep(0.005)

    cls(loop).run(main())
    steps = [(ph, name, ts, tid) for ph, name, ts, tid in sequence(recorder) if tid != 1]
    assert steps == [
        ("i", "spawned", 0.0, 2),             # main: spawn() is called before the loop runs
        ("i", "spawned", 0.0, 3),             # child, spawned inside main's first step
        ("X", "step", 0.0, 2),                # main: spawn, then sleep(5 ms)
        ("X", "step", 0.0, 3),                # child: sleep(2 ms)
        ("X", "step", 2.0, 3), ("i", "exited", 2.0, 3),
        ("X", "step", 5.0, 2), ("i", "exited", 5.0, 2),
    ]
    awaiting = [e["args"]["awaiting"] for e in recorder.events if e["name"] == "step"]
    assert awaiting == ["sleep 0.005 s", "sleep 0.002 s", None, None]
    names = recorder.trace()["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in names if e["name"] == "thread_name"}
    assert tracks[2] == "task main" and tracks[3] == "task child"
    validate(recorder.trace())


def test_generators_stack_depth_counter() -> None:
    loop, clock, selector = fake_loop()
    recorder = record(loop)

    def inner() -> Any:
        yield sleep(0.001)

    def middle() -> Any:
        yield inner()

    def main() -> Any:
        yield middle()

    Scheduler(loop).run(main())
    depths = [e["args"]["depth"] for e in recorder.events if e["name"] == "stack depth (main)"]
    # Suspended in sleep: main -> middle -> inner -> sleep's generator; then finished.
    assert depths == [4, 0]


def test_coroutines_task_steps_and_the_futures_awaited() -> None:
    loop, clock, selector = fake_loop()
    recorder = record(loop)
    released: Future | None = None

    async def waiter() -> str:
        nonlocal released
        released = Future(loop=loop)
        return await released

    async def main() -> str:
        task = tasks.create_task(waiter())
        await tasks.sleep(0.003)
        released.set_result("hello")
        return await task

    assert tasks.run(main(), loop=loop) == "hello"
    steps = [(ph, name, ts, tid) for ph, name, ts, tid in sequence(recorder) if tid != 1]
    assert steps == [
        ("i", "spawned", 0.0, 2),
        ("i", "spawned", 0.0, 3),              # inside main's first step...
        ("X", "step", 0.0, 2),                 # ...which creates waiter and sleeps
        ("X", "step", 0.0, 3),                 # waiter: awaits its future
        ("X", "step", 3.0, 2),                 # main: sets the result, awaits waiter
        ("X", "step", 3.0, 3), ("i", "exited", 3.0, 3),
        ("X", "step", 3.0, 2), ("i", "exited", 3.0, 2),
    ]
    awaiting = [e["args"]["awaiting"] for e in recorder.events if e["name"] == "step"]
    assert awaiting == ["Future", "Future", "Task waiter", None, None]
    loop_track = [name for ph, name, ts, tid in sequence(recorder) if tid == 1 and ts == 3.0]
    assert loop_track[:4] == ["timers", "_set_result_unless_done", "callbacks", "wait"], (
        "the sleep's timer resolves main's future; main steps in the next iteration")
    assert "Task._wakeup" in loop_track
    validate(recorder.trace())


# -- the ring buffer, and partial traces ----------------------------------------------------


def test_the_ring_keeps_the_last_events_and_counts_the_dropped() -> None:
    loop, clock, selector = fake_loop()
    recorder = record(loop, capacity=10)
    count = 0

    def again() -> None:
        nonlocal count
        count += 1
        if count < 100:
            loop.call_soon(again)
        else:
            loop.stop()

    loop.call_soon(again)
    loop.run_forever()
    trace = recorder.trace()
    assert len(recorder.events) == 10
    assert trace["otherData"]["dropped_events"] == recorder.recorded - 10 > 500
    assert trace["traceEvents"][-1]["name"] == "run", "the newest events are the ones kept"
    validate(trace)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Recorder(capacity=0)


def test_ctrl_c_in_a_callback_leaves_a_valid_partial_trace(tmp_path: Any) -> None:
    loop, clock, selector = fake_loop()
    recorder = record(loop)

    def interrupt() -> None:
        raise KeyboardInterrupt

    loop.call_later(0.001, interrupt)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    path = recorder.write(tmp_path / "partial.json")
    trace = json.loads(path.read_text())
    validate(trace)
    unfinished = {e["name"] for e in trace["traceEvents"] if e.get("args", {}).get("unfinished")}
    assert unfinished == {"interrupt"}, "the callback cut short is closed when the run ends"
    loop.close()


def test_writing_to_an_unwritable_path_raises_oserror(tmp_path: Any) -> None:
    recorder = Recorder()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        recorder.write(blocker / "trace.json")


def test_the_format_check_finds_broken_events() -> None:
    assert chrome.problems({"traceEvents": [{"name": "x", "ph": "X", "ts": -1, "pid": 1, "tid": 1}]})
    assert chrome.problems({"traceEvents": [{"name": "x", "ph": "Q", "ts": 0, "pid": 1, "tid": 1}]})
    assert chrome.problems({"traceEvents": [{"name": "x", "ph": "E", "ts": 0, "pid": 1, "tid": 1}]})
    assert chrome.problems({"traceEvents": [{"name": "c", "ph": "C", "ts": 0, "pid": 1, "tid": 1,
                                             "args": {"n": "1"}}]})
    assert chrome.problems({"events": []})
    assert chrome.problems({"traceEvents": [{"name": "x", "ph": "i", "ts": 0, "pid": "1", "tid": 1}]})


# -- transports of Part II (coroutines streams) --------------------------------------------


def test_coroutines_streams_report_reads_and_writes_with_their_system_calls() -> None:
    from tinyloop.coroutines.streams import StreamReader, StreamWriter

    loop = Loop()
    recorder = record(loop)
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def reader() -> bytes:
        return await StreamReader(a, loop=loop).read(100)

    async def writer() -> None:
        StreamWriter(b, loop=loop).write(b"hello")

    async def main() -> bytes:
        task = tasks.create_task(reader())   # its first recv finds nothing: EAGAIN
        await tasks.sleep(0)
        tasks.create_task(writer())
        return await task

    try:
        assert tasks.run(main(), loop=loop) == b"hello"
    finally:
        a.close()
        b.close()
    io = [(e["name"], e["args"]["bytes"], e["args"]["syscalls"]) for e in recorder.events
          if e["name"] in ("read", "write")]
    assert io == [("write", 5, 1), ("read", 5, 2)], "the read took two recv(2): EAGAIN, then the data"
    validate(recorder.trace())


# -- the cost when nobody listens ------------------------------------------------------------


def _calls_into_trace(run: Any) -> list[str]:
    """The functions of tinyloop/trace/ that Python called while ``run()`` ran."""
    called: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and "tinyloop/trace/" in frame.f_code.co_filename.replace("\\", "/"):
            called.append(frame.f_code.co_name)

    import sys
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return called


def test_no_instrument_no_call_on_part_ii_loops() -> None:
    def run() -> None:
        loop, clock, selector = fake_loop()
        Scheduler(loop).run(generator_program()())

        async def main() -> None:
            await tasks.sleep(0.001)
            await tasks.gather(tasks.sleep(0), tasks.sleep(0.002))

        loop2, _, _ = fake_loop()
        tasks.run(main(), loop=loop2)

    assert _calls_into_trace(run) == [], "with no instrument, a hook site is an attribute test only"


def test_no_instrument_no_call_on_uv() -> None:
    from tinyloop import stages
    if stages.get("uv").unavailable():
        pytest.skip(stages.get("uv").unavailable())
    import asyncio

    from tinyloop.uv import new_event_loop

    async def echo() -> bytes:
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.write(b"ping\n")
        answer = await reader.readline()
        writer.close()
        server.close()
        await server.wait_closed()
        return answer

    def run() -> None:
        loop = new_event_loop()
        try:
            assert loop.run_until_complete(echo()) == b"ping\n"
        finally:
            loop.close()

    assert _calls_into_trace(run) == [], "uv's hot paths test a C flag, and call nothing"

    # Added, then removed: the flag is cleared and the prepare handle stopped.
    loop = new_event_loop()
    recorder = record(loop)
    try:
        assert loop.run_until_complete(echo()) == b"ping\n"
        assert recorder.recorded > 0
        assert loop.remove_instrument(recorder) is True
        assert _calls_into_trace(lambda: loop.run_until_complete(echo())) == []
    finally:
        loop.close()


async def _echo(reader: Any, writer: Any) -> None:
    writer.write(await reader.readline())
    await writer.drain()
    writer.close()


def test_the_format_check_finds_spans_that_overlap_without_nesting() -> None:
    def span(name: str, ts: float, dur: float) -> dict:
        return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1}

    nested = {"traceEvents": [span("run", 0, 100), span("wait", 0, 40), span("cb", 50, 10)]}
    assert chrome.overlaps(nested) == []
    crossed = {"traceEvents": [span("run", 0, 100), span("wait", 0, 40), span("cb", 30, 20)]}
    assert chrome.overlaps(crossed) == ["X 'cb' at 30 µs overlaps 'wait' on its thread without nesting"]


def test_what_recording_costs_is_measured_in_cpu_time_per_event() -> None:
    from tinyloop.trace.recorder import cost_per_event
    cost = cost_per_event(repeat=3, iterations=300)
    assert 1e-8 < cost < 1e-3, f"{cost * 1e6:.2f} µs per event"
