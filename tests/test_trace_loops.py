"""The recorder on Part III's and Part IV's loops (tinyloop.aio, tinyloop.uv).

tinyloop.aio inherits Part II's hook sites, so the same asyncio program
gives an exact sequence on the virtual clock; its transports add the bytes
and system calls of each read and write.  tinyloop.uv runs on libuv's own
clock, so its trace is compared with aio's by order, not by time, and
differs only where KNOWN_DIFFERENCES says it does.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from fakes import FakeSelector, VirtualClock
from test_trace_recorder import validate

from tinyloop.aio.unix_events import SelectorEventLoop
from tinyloop.stages import get as get_stage
from tinyloop.trace.recorder import Recorder, record


def program(log: list[str], unit: float = 0.010) -> Any:
    """A small asyncio program: a callback, a timer, two tasks, a bare sleep(0).

    Its timer and sleeps end 1, 2 and 3 ``unit`` seconds after it starts.
    """

    async def child(name: str, delay: float) -> str:
        log.append(f"{name} start")
        await asyncio.sleep(delay)
        log.append(f"{name} end")
        return name

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.call_soon(log.append, "call_soon")
        loop.call_later(unit, log.append, "call_later")
        one = asyncio.ensure_future(child("one", 3 * unit))
        await asyncio.sleep(0)
        two = asyncio.ensure_future(child("two", 2 * unit))
        return list(await asyncio.gather(one, two))

    return main


def run_traced(loop: asyncio.AbstractEventLoop, main: Any) -> Recorder:
    recorder = record(loop)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return recorder


def callback_order(recorder: Recorder) -> list[str]:
    """Loop-track callbacks and task steps, in the order they ended, timings dropped."""
    out = []
    for event in recorder.events:
        if event.get("cat") == "callback":
            out.append(event["name"])
        elif event.get("cat") == "task" and event["name"] == "step":
            out.append(f"step {recorder.track_name(event['tid'])}")
    return out


def test_aio_program_on_the_virtual_clock() -> None:
    clock = VirtualClock()
    log: list[str] = []
    recorder = run_traced(SelectorEventLoop(FakeSelector(clock), clock), program(log))
    # main queues call_soon, then one's first step: they run in that order.
    assert log == ["call_soon", "one start", "two start", "call_later", "two end", "one end"]
    steps = [(e["name"], e["ts"] / 1000, recorder.track_name(e["tid"]), e.get("args", {}).get("awaiting"))
             for e in recorder.events if e.get("cat") == "task"]
    assert steps == [
        ("spawned", 0.0, "task main", None), ("step", 0.0, "task main", None),  # sleep(0): a bare yield
        ("spawned", 0.0, "task child", None), ("step", 0.0, "task child", "Future"),  # one sleeps 2 ms
        ("step", 0.0, "task main", "gather"),                                   # creates two, gathers
        ("spawned", 0.0, "task child#2", None), ("step", 0.0, "task child#2", "Future"),
        ("step", 20.0, "task child#2", None), ("exited", 20.0, "task child#2", None),
        ("step", 30.0, "task child", None), ("exited", 30.0, "task child", None),
        ("step", 30.0, "task main", None), ("exited", 30.0, "task main", None),
    ]
    assert callback_order(recorder)[:3] == ["step task main", "Task.step", "list.append"], (
        "a task step is a callback on the loop track, and its span on the task's track")
    waits = [e["args"]["timeout"] for e in recorder.events if e["name"] == "wait"]
    assert [w for w in waits if w] == [0.010, pytest.approx(0.010), pytest.approx(0.010)], (
        "three waits of 10 ms: until call_later, two's sleep, one's sleep")
    validate(recorder.trace())


def test_aio_transport_reads_and_writes() -> None:
    loop = SelectorEventLoop()
    size = 3 * 1024 * 1024  # more than a socket buffer: some of it must wait in the transport

    async def main() -> int:
        server = await asyncio.start_server(_echo_count, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # A small send buffer, so the kernel takes only part of the first write.
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        writer.write(b"x" * size)
        writer.write_eof()
        total = int(await reader.read())
        writer.close()
        server.close()
        await server.wait_closed()
        return total

    recorder = record(loop)
    try:
        assert loop.run_until_complete(main()) == size
    finally:
        loop.close()
    reads = [e["args"] for e in recorder.events if e["name"] == "read"]
    writes = [e["args"] for e in recorder.events if e["name"] == "write"]
    assert all(r["syscalls"] == 1 for r in reads)
    # The server read all the bytes sent (plus the few of the answer, on the client).
    assert sum(r["bytes"] for r in reads) >= size
    assert reads[-1]["bytes"] == 0 or any(r["bytes"] == 0 for r in reads), "EOF is a read of 0 bytes"
    first = writes[0]
    assert first["syscalls"] == 1 and 0 < first["bytes"] < size and first["buffered"] == size - first["bytes"]
    assert sum(w["bytes"] for w in writes) >= size
    assert any(w["buffered"] == 0 and w["syscalls"] == 1 for w in writes[1:]), "the buffer drains"
    buffered = [e for e in recorder.events if e["ph"] == "C" and e["name"].startswith("buffered")]
    assert max(e["args"]["bytes"] for e in buffered) > 0
    validate(recorder.trace())


def test_aio_write_reports_what_pause_writing_sets_off() -> None:
    """An observer must not change what it observes: a protocol's pause_writing, called from a
    write that the instruments report, writes to another transport, and that write is reported
    too (a version that took the instruments off the loop for the observed write lost it)."""
    loop = SelectorEventLoop()
    wrote: list[tuple[Any, int]] = []

    class Writes:
        def transport_wrote(self, transport: Any, nbytes: int, syscalls: int, buffered: int) -> None:
            wrote.append((transport, nbytes))

    class PausesIntoOther(asyncio.Protocol):
        other: Any = None

        def pause_writing(self) -> None:
            self.other.write(b"paused")

    async def main() -> tuple[Any, Any]:
        pairs = [socket.socketpair() for _ in range(2)]
        pairs[0][0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        full, _ = await loop.connect_accepted_socket(PausesIntoOther, pairs[0][0])
        other, _ = await loop.connect_accepted_socket(asyncio.Protocol, pairs[1][0])
        full.get_protocol().other = other
        full.write(b"x" * (1024 * 1024))  # more than the kernel takes: over the high-water mark
        for transport in (full, other):
            transport.abort()
        for a, b in pairs:
            a.close()
            b.close()
        return full, other

    loop.add_instrument(Writes())
    try:
        full, other = loop.run_until_complete(main())
    finally:
        loop.close()
    assert [t for t, _ in wrote] == [other, full], "both writes reported, the inner one first"
    assert wrote[0][1] == len(b"paused")


async def _echo_count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    total = len(await reader.read())
    writer.write(str(total).encode())
    await writer.drain()
    writer.close()
def test_uv_and_aio_run_the_same_program_in_the_same_order() -> None:
    stage = get_stage("uv")
    if stage.unavailable():
        pytest.skip(stage.unavailable())
    from tinyloop.uv import new_event_loop

    aio_log: list[str] = []
    uv_log: list[str] = []
    clock = VirtualClock()
    aio = run_traced(SelectorEventLoop(FakeSelector(clock), clock), program(aio_log))
    # On libuv's real clock, 100 ms apart: a busy machine that holds the
    # process up for less than that cannot reorder the program.
    uv = run_traced(new_event_loop(), program(uv_log, unit=0.100))
    assert uv_log == aio_log
    # No I/O in this program: KNOWN_DIFFERENCES' one ordering difference (uv runs
    # I/O callbacks in its poll phase) cannot show, so the orders are the same.
    assert callback_order(uv) == callback_order(aio)
    assert [e["name"] for e in uv.events if e.get("cat") == "task"] == \
        [e["name"] for e in aio.events if e.get("cat") == "task"]
    # uv's own phases frame the same callbacks: the ready queue runs in idle,
    # the poll (the wait) comes next, then check; timers are made due in
    # libuv's timer phase, three in all (100, 200 and 300 ms), one at a time
    # unless the process was held up 100 ms (then two at once).  libuv counts whole milliseconds and may wake a fraction early,
    # with nothing due yet.
    names = [e["name"] for e in uv.events if e.get("cat") == "loop" or e["ph"] == "i"]
    assert {"idle", "wait", "check", "run"} <= set(names)
    due = [e["args"]["due"] for e in uv.events if e["name"] == "timers due" and e["args"]["due"]]
    assert sum(due) == 3 and 1 <= len(due) <= 3, due
    assert "callbacks" not in names and "timers" not in names, "uv reports phases, not Part II's steps"
    validate(uv.trace())


def io_program(loop: asyncio.AbstractEventLoop, log: list[str]) -> tuple[Any, Any]:
    """A reader whose descriptor is ready, and a callback queued just before the loop waits.

    ``first`` runs, queues ``second`` with call_soon; the socket is already
    readable.  asyncio (and aio) queue the reader's callback behind
    ``second``; libuv (uv) runs it in the poll phase, before ``second``.
    """
    a, b = socket.socketpair()
    a.setblocking(False)
    b.send(b"ready")

    def on_readable() -> None:
        log.append("on_readable")
        loop.remove_reader(a)
        loop.call_soon(loop.stop)

    def first() -> None:
        log.append("first")
        loop.add_reader(a, on_readable)
        loop.call_soon(second)

    def second() -> None:
        log.append("second")

    loop.call_soon(first)
    return a, b


def test_io_before_queued_callbacks_on_uv_only_as_known_differences_says() -> None:
    stage = get_stage("uv")
    if stage.unavailable():
        pytest.skip(stage.unavailable())
    from tinyloop.uv import new_event_loop

    orders = {}
    for name, loop in (("aio", SelectorEventLoop()), ("uv", new_event_loop())):
        log: list[str] = []
        recorder = record(loop)
        a, b = io_program(loop, log)
        try:
            loop.run_forever()
        finally:
            loop.close()
            a.close()
            b.close()
        orders[name] = [e["name"] for e in recorder.events
                        if e.get("cat") == "callback" and e["name"] != "_read_from_self"]
        reader = next(e for e in recorder.events if e["name"] == "on_readable")
        inside = [w for w in recorder.events if w["name"] == "wait"
                  and w["ts"] <= reader["ts"] and reader["ts"] + reader["dur"] <= w["ts"] + w["dur"]]
        # uv's wait is libuv's poll phase, which runs the I/O callbacks; aio's wait ends before them.
        assert bool(inside) == (name == "uv"), f"{name}: the reader inside a wait span: {inside}"
        assert orders[name][:3] == [n for n in log], f"{name}: the trace shows the order the program ran in"
        validate(recorder.trace())
    # tests/conformance/KNOWN_DIFFERENCES.md: "an I/O callback ... runs in libuv's
    # poll phase ... so it may run before callbacks that call_soon queued earlier".
    assert orders["aio"][:3] == ["first", "second", "on_readable"]
    assert orders["uv"][:3] == ["first", "on_readable", "second"]
