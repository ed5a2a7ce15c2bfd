"""The book's figures drawn from traces: what each one records, and the command that makes it.

    python docs/_ext/trace_figures.py                  every figure, into benchmarks/results/local/traces/
    python docs/_ext/trace_figures.py callbacks-stall  one figure (the names: --list)
    python docs/_ext/trace_figures.py --quick          only the figures the book traces while it builds
    python docs/_ext/trace_figures.py --reference      the recorded ones, into benchmarks/results/traces/

Each figure is one Chrome trace (tinyloop.trace's recorder) and the HTML
timeline tinyloop.trace.timeline draws of it.  Its source is either
``build``: a stage's own code, or a program of a few lines whose callbacks
are named for what they stand for, on the quizzes' virtual clock
(tinyloop.quiz.runner: TICK s per reading; a wait moves it instead of
sleeping), so that book_trace.py, beside this file, traces it while the book
builds, the same on every machine (a span's width counts clock readings,
not time); or ``reference``: a stage's real server recorded in real time,
drawn from its committed file, which only ``--reference`` rewrites.  Its
clients run in a process of their own; on a shared machine, record it at
real-time priority (``chrt -f 10 python docs/_ext/trace_figures.py NAME
--reference``, as root), or other processes preempt the server mid-callback.
This lives beside the book's build, not in benchmarks/: it measures no loop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tinyloop.quiz.runner import VIRTUAL_TICK as TICK  # seconds the virtual clock moves at each reading
from tinyloop.quiz.runner import VirtualClock, VirtualTimeSelector
from tinyloop.trace.recorder import Recorder, record

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "benchmarks" / "results" / "traces"   # committed: the recorded figures the book draws
LOCAL = ROOT / "benchmarks" / "results" / "local" / "traces"   # every other run's, ignored by git

__all__ = ["FIGURES", "TICK", "Figure", "get", "main", "select_tracks", "trace_of", "window"]

Trace = dict[str, Any]   # a Trace Event Format JSON object


@dataclass(frozen=True)
class Figure:
    """One figure: its name, chapter, source (``build`` or ``reference``), and what to draw.

    ``make()`` returns the trace.  ``tracks`` lists the track names to draw,
    by prefix (empty: all); ``counters`` the counters, by prefix (None: all);
    ``crop(trace)`` gives the (start, end) in µs to draw (None: open): the
    window the caption is about.  ``shows`` names the spans and marks the
    caption points at, each of which the drawn window must hold whole
    (tests/test_book_figures.py checks it).
    """

    name: str
    chapter: str
    source: str
    make: Callable[[], Trace]
    summary: str
    tracks: tuple[str, ...] = ()
    counters: tuple[str, ...] | None = None
    crop: Callable[[Trace], tuple[float | None, float | None]] | None = None
    awaits: bool = False  # each task step named for what it ended awaiting
    text: bool = False    # the book prints the drawn trace as text below it too (tinyloop.quiz.steps)
    facts: Callable[[Trace], str] | None = None   # numbers read off the drawn trace, for the caption
    shows: tuple[str, ...] = ()   # span and mark names (a span's cat, or its name) the caption points at

    def drawn(self, trace: Trace) -> Trace:
        """What the book draws of ``trace``: its tracks and counters, cut to its crop; with ``awaits``,
        each step named ``→ AWAITED``, so a printed page shows what only a hover would."""
        if self.crop is not None:
            trace = window(trace, *self.crop(trace))
        if self.awaits:
            trace = {**trace, "traceEvents": [
                {**event, "name": f"→ {event['args']['awaiting']}", "cat": "step"}  # (cat: keeps its colour)
                if event.get("name") == "step" and (event.get("args") or {}).get("awaiting") else event
                for event in trace["traceEvents"]]}
        return select_tracks(trace, self.tracks, self.counters)

    @property
    def command(self) -> str:
        """The command that makes this figure's trace (and, for a reference one, rewrites it)."""
        extra = " --reference" if self.source == "reference" else ""
        return f"python docs/_ext/trace_figures.py {self.name}{extra}"

    @property
    def reference_file(self) -> Path:
        return REFERENCE / f"{self.name}.json"


# -- build: traced on the virtual clock while the book builds ----------------------------

REQUEST = b"GET / HTTP/1.1\r\nHost: tinyloop\r\n\r\n"
LAST_REQUEST = b"GET / HTTP/1.1\r\nHost: tinyloop\r\nConnection: close\r\n\r\n"


@contextlib.contextmanager
def _part2_loop(selector_type: type = VirtualTimeSelector) -> Iterator[tuple[Any, Any, Recorder]]:
    """Part II's loop on the virtual clock, recorded: ``(loop, selector, recorder)``; closed after."""
    from tinyloop.callbacks.loop import Loop
    clock = VirtualClock(TICK)
    selector = selector_type(clock)
    loop = Loop(selector=selector, clock=clock)
    recorder = record(loop)
    try:
        yield loop, selector, recorder
    finally:
        loop.close()


@contextlib.contextmanager
def _aio_loop() -> Iterator[tuple[Any, Recorder, socket.socket, socket.socket, Any, type]]:
    """tinyloop.aio's loop on the virtual clock, recorded, and a connected pair:
    ``(loop, recorder, server's end, client's end, closed, Protocol)``, where Protocol is the aio
    stage's HTTPProtocol resolving the future ``closed`` when its connection is lost."""
    from tinyloop.aio.server import HTTPProtocol
    from tinyloop.aio.unix_events import SelectorEventLoop
    clock = VirtualClock(TICK)
    loop = SelectorEventLoop(VirtualTimeSelector(clock), clock)
    server, client = socket.socketpair()
    closed = loop.create_future()

    class Protocol(HTTPProtocol):
        def connection_lost(self, exc: Exception | None) -> None:
            closed.set_result(None)

    try:
        yield loop, record(loop), server, client, closed, Protocol
    finally:
        client.close()
        loop.close()


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(5)   # blocking again, within a limit
    with sock.makefile("rb") as file:
        return file.read()


def callbacks_iteration() -> Trace:
    """Part II's loop, two iterations: soon, I/O and a timer due at once; then a later timer."""
    a, b = socket.socketpair()
    with a, b, _part2_loop() as (loop, _, recorder):
        def call_soon_cb() -> None:
            pass

        def on_readable() -> None:
            loop.remove_reader(a)

        def call_later_0() -> None:
            pass

        def later_300us() -> None:
            loop.stop()

        loop.add_reader(a, on_readable)
        b.send(b"x")
        loop.call_later(0, call_later_0)
        loop.call_later(0.0003, later_300us)
        loop.call_soon(call_soon_cb)
        loop.run_forever()
    return recorder.trace()


def coroutines_tasks() -> Trace:
    """Chapter II's tasks: main starts two, one sleeps, one awaits a future a timer resolves."""
    from tinyloop.coroutines import tasks
    from tinyloop.coroutines.futures import Future

    async def sleeper() -> str:
        await tasks.sleep(0.00005)
        return "slept"

    async def waiter(future: Future) -> str:
        return await future

    with _part2_loop() as (loop, _, recorder):
        async def main() -> None:
            future = Future(loop=loop)
            loop.call_later(0.0001, future.set_result, "resolved")
            first = tasks.create_task(sleeper())
            second = tasks.create_task(waiter(future))
            await first
            await second

        tasks.run(main(), loop=loop)
    return recorder.trace()


def generators_stack() -> Trace:
    """Two tasks of the generator-stack scheduler: one calls three levels deep and back, waiting at
    each level; the other waits at the top.  The counter is each task's stack of generators."""
    from tinyloop.generators.scheduler import Scheduler
    from tinyloop.generators.traps import sleep, spawn

    def inner() -> Any:
        yield sleep(0.0002)

    def middle() -> Any:
        yield sleep(0.0002)
        yield inner()
        yield sleep(0.0002)

    def outer() -> Any:
        yield sleep(0.0002)
        yield middle()
        yield sleep(0.0002)

    def ticker() -> Any:
        for _ in range(4):
            yield sleep(0.0003)

    def main() -> Any:
        yield spawn(ticker())
        yield sleep(0.0002)
        yield outer()
        yield sleep(0.0002)

    with _part2_loop() as (loop, _, recorder):
        Scheduler(loop).run(main())
    return recorder.trace()


def coroutines_request() -> Trace:
    """The coroutines stage's own handle_connection, two requests, the second arriving later: its read
    waits, and the streams register the socket for that one wait and unregister it after.  The
    selector marks each register/unregister on the loop's track."""
    from tinyloop.coroutines import tasks
    from tinyloop.coroutines.server import handle_connection
    from tinyloop.coroutines.streams import StreamReader, StreamWriter

    class Marked(VirtualTimeSelector):
        recorder: Recorder | None = None

        def _mark(self, what: str, fileobj: Any) -> None:
            if self.recorder is not None:
                fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
                self.recorder.instant(what, self.recorder.now(), cat="selector", args={"fd": fd})

        def register(self, fileobj: Any, events: int, data: Any = None) -> Any:
            self._mark("register", fileobj)
            return super().register(fileobj, events, data)

        def unregister(self, fileobj: Any) -> Any:
            self._mark("unregister", fileobj)
            return super().unregister(fileobj)

    with _part2_loop(Marked) as (loop, selector, recorder):
        selector.recorder = recorder
        server, client = socket.socketpair()
        server.setblocking(False)

        async def main() -> None:
            reader = StreamReader(server, loop=loop)
            await handle_connection(reader, StreamWriter(server, reader, loop=loop))

        with client:
            client.sendall(REQUEST)
            loop.call_later(0.0003, client.sendall, LAST_REQUEST)
            tasks.run(main(), loop=loop)
            assert _read_all(client).count(b"HTTP/1.1 200") == 2
    return recorder.trace()


def _aio_request(payload: bytes, responses: int) -> Trace:
    """The aio stage's HTTPProtocol on one connection, the client's ``payload`` already sent; the
    loop runs only the server's side, until the last request's ``Connection: close``."""
    with _aio_loop() as (loop, recorder, server, client, closed, Protocol):
        client.sendall(payload)
        loop.run_until_complete(loop.connect_accepted_socket(Protocol, server))
        loop.run_until_complete(closed)
        answer = _read_all(client)
        assert answer.count(b"HTTP/1.1 200") == responses, answer[:200]
    return recorder.trace()


def asyncio_buffered() -> Trace:
    """A 512 KiB echo on tinyloop.aio, the client on the same loop: the answer is more than the socket
    takes, so write() sends what it can, buffers the rest and registers a writer, whose callbacks send
    the rest as the client reads."""
    import asyncio
    body = b"x" * (512 * 1024)
    request = memoryview(b"POST /echo HTTP/1.1\r\nHost: tinyloop\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
    received = bytearray()
    eof = False
    with _aio_loop() as (loop, recorder, server, client, closed, Protocol):
        client.setblocking(False)

        def client_sends() -> None:
            nonlocal request
            try:
                request = request[client.send(request[:65536]):]
            except BlockingIOError:
                return
            if not request:
                loop.remove_writer(client)

        def client_reads() -> None:
            nonlocal eof
            try:
                chunk = client.recv(65536)
            except BlockingIOError:
                return
            received.extend(chunk)
            if not chunk:
                eof = True
                loop.remove_reader(client)

        async def main() -> None:
            await loop.connect_accepted_socket(Protocol, server)
            loop.add_writer(client, client_sends)
            loop.add_reader(client, client_reads)
            await closed
            while not eof:
                await asyncio.sleep(0)

        loop.run_until_complete(main())
        assert received.startswith(b"HTTP/1.1 200") and received.endswith(body[-100:])
    return recorder.trace()


# -- reference: recorded on this machine in real time, committed ---------------------------


def _trace_stage(stage: str, **load: Any) -> Trace:
    """``python -m tinyloop trace STAGE`` (trace_stage) into a scratch folder; its JSON."""
    from tinyloop.commands.trace import trace_stage
    with tempfile.TemporaryDirectory(prefix="tinyloop-figure-") as scratch:
        status = trace_stage(stage, Path(scratch), **load)
        if status != 0:
            raise RuntimeError(f"trace_stage({stage!r}, {load}) failed with status {status}")
        return json.loads((Path(scratch) / f"{stage}.json").read_text())


def _serve_while(code: str, args: list[str], module: Any, sock: socket.socket, *, timeout: float,
                 stdin: bool = False) -> tuple[list[str], subprocess.Popen[str]]:
    """Serve ``sock`` with the stage ``module`` while a child process runs the clients' ``code``.

    The child gets ``args``, then this process's pid as its last argument,
    and must send it SIGINT when its load is done (a Part I server, a
    baseline, stops on it as on Ctrl-C): the clients never share this
    process, or its GIL, with the server they measure.  Returns the child's
    stdout lines and the child itself (still running when ``stdin`` is
    asked for: it waits for that pipe to close).  ``sock`` is closed.
    Raises RuntimeError if the child did not stop the server within ``timeout`` s.
    """
    child = subprocess.Popen([sys.executable, "-c", code, *args, str(os.getpid())], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    late = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    signal.alarm(int(timeout))   # a child that never signals still ends the serve
    try:
        with contextlib.suppress(KeyboardInterrupt):
            module.serve(sock)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, late)
        signal.signal(signal.SIGINT, previous)
        sock.close()
    lines: list[str] = []
    assert child.stdout is not None
    for line in child.stdout:
        lines.append(line.strip())
        if line.startswith("done"):
            break
    if not lines or not lines[-1].startswith("done"):
        child.kill()
        child.wait()
        raise RuntimeError(f"the clients' process did not finish: {lines}")
    if not stdin:
        child.wait(timeout=10)
    return lines, child


def _name_track(tid: int, name: str, index: int) -> list[dict[str, Any]]:
    """The M events (the format's way) that name track ``tid`` and place it ``index``-th."""
    return [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}},
            {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": index}}]


IDLE = 1000

# The child that holds the idle connections (each sends one request, reads its
# answer and stays open), then sends the load, so that no client code competes
# with the server for this process's GIL: it prints how many it holds, then
# "done", the load's answers and its start and end (time.monotonic), stops the
# server with SIGINT, and exits when stdin closes.
_HOLD_IDLE = """
import os, signal, sys, time
from benchmarks.harness.process import raise_nofile
from tinyloop.testing import Crowd
from tinyloop.commands.load import scripted_load
port, count, server = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
try:
    raise_nofile(count + 320)
    crowd = Crowd(("127.0.0.1", port), timeout=10.0)
    crowd.open(count)
    print(sum(status == 200 for status, _ in crowd.ask()), flush=True)
    time.sleep(0.2)
    start = time.monotonic()
    ok = scripted_load("127.0.0.1", port, 10, 2)
    print("done", ok, start, time.monotonic(), flush=True)
except Exception as error:
    print("done failed", repr(error), flush=True)
finally:
    os.kill(server, signal.SIGINT)
sys.stdin.read()
crowd.close()
"""


def _readiness(stage: str) -> Trace:
    """A readiness stage with IDLE idle connections (held by a child process) and a short load."""
    from tinyloop import stages
    from tinyloop.serving import listen
    from tinyloop.trace.outside import ReadinessProbe
    module = stages.load(stage)
    recorder = Recorder(time.monotonic)
    sock = listen("127.0.0.1", 0)
    with ReadinessProbe(recorder).installed():
        lines, holder = _serve_while(_HOLD_IDLE, [str(sock.getsockname()[1]), str(IDLE)], module, sock,
                                     timeout=120, stdin=True)
    if holder.stdin:
        holder.stdin.close()
    holder.wait(timeout=10)
    done = lines[-1].split()
    if len(done) != 4:
        raise RuntimeError(f"the load on {stage} failed: {' '.join(done[1:])}")
    idle = int(lines[0]) if len(lines) > 1 else 0
    if idle != IDLE:
        raise RuntimeError(f"only {idle} of {IDLE} idle connections were opened")
    t0 = time.monotonic() - recorder.now() / 1e6   # the recorder's zero, on the same clock
    load_start, load_end = ((float(t) - t0) * 1e6 for t in done[2:])
    trace = recorder.trace()
    trace["otherData"].update(figure=f"{stage}: {IDLE} idle connections, 10 requests over 2 busy ones",
                              load_start=load_start, load_end=load_end)
    return trace


def readiness_idle() -> Trace:
    """select, then epoll, each beside 1,000 idle connections, on one time axis from its first request.

    Each stage's recording is cut to its load (the idle connections are open
    and silent by then) and moved to a track of its own; its counter is
    renamed for it.
    """
    merged: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "tinyloop"}}]
    other: dict[str, Any] = {"recorder": "tinyloop.trace", "recorded_events": 0, "dropped_events": 0}
    for tid, stage in enumerate(("select", "epoll"), start=1):
        trace = _readiness(stage)
        data = trace["otherData"]
        # From just before the first wait of the load that returns something, to the load's end.
        first = min(e["ts"] + e["dur"] for e in _events(trace, "X", "wait")
                    if e["ts"] + e["dur"] > data["load_start"] and e["args"]["events"])
        start = first - 200.0
        cut = window(trace, start, data["load_end"], carry=False)  # (the setup's counts would mislead)
        for event in cut["traceEvents"]:
            if event.get("ph") == "M":
                continue
            event = {**event, "tid": tid, "ts": round(event["ts"] - start, 3)}
            if event.get("ph") == "C":
                event["name"] = f"{event['name']}: {stage}"
            merged.append(event)
        merged += _name_track(tid, f"{stage} server, {IDLE:,} idle", tid)
        other["recorded_events"] += data["recorded_events"]
        other["dropped_events"] += data["dropped_events"]
        other[stage] = data["figure"]
    return {"traceEvents": merged, "displayTimeUnit": "ms", "otherData": other}


CLIENT_REQUESTS = 2        # per client, on one keep-alive connection
CLIENT_COMPUTE_MS = 20     # each a /compute?ms=20: the handler holds its thread (and the GIL) 20 ms


def baselines_clients() -> Trace:
    """The blocking and threaded stages, three clients at once: a track per client, a track per server thread.

    These servers have no loop and no hooks.  The recording wraps the
    stage's ``serve_client`` (called once per connection) to time each
    connection on the thread that served it, and times each client from its
    connect to its last answer.  Both stages' times start at 0, at the
    moment their three clients start.
    """
    recorder = Recorder(time.monotonic)
    tracks: dict[str, int] = {}
    for stage in ("blocking", "threaded"):
        _serve_three_clients(stage, recorder, tracks)
    trace = recorder.trace()
    # The recorder names only its loop's and its tasks' tracks; these are named here.
    order = sorted(tracks, key=lambda name: (not name.startswith("blocking"), "server" in name, name))
    trace["traceEvents"] += [event for index, name in enumerate(order)
                             for event in _name_track(tracks[name], name, 100 + index)]
    return trace


# The three clients, in a process of their own: each prints its number, when it
# connected and when its last answer came (time.monotonic); then "done", and
# SIGINT stops the server.
_THREE_CLIENTS = """
import http.client, os, signal, sys, threading, time
port, requests, compute_ms, server = (int(arg) for arg in sys.argv[1:])

def client(number):
    start = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(requests):
        connection.request("GET", f"/compute?ms={compute_ms}")
        connection.getresponse().read()
    connection.close()
    print(number, start, time.monotonic(), flush=True)

try:
    threads = [threading.Thread(target=client, args=(number,)) for number in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(0.05)
    print("done", flush=True)
finally:
    os.kill(server, signal.SIGINT)
"""


def _serve_three_clients(stage: str, recorder: Recorder, tracks: dict[str, int]) -> None:
    from tinyloop import stages
    from tinyloop.serving import listen
    module = stages.load(stage)
    original = module.serve_client   # each stage's own global: threaded imports it from blocking
    lock = threading.Lock()
    served: list[tuple[float, float, str]] = []   # (start, end, track), in the recorder's µs

    def timed(sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        start = recorder.now()
        try:
            original(sock, *args, **kwargs)
        finally:
            with lock:
                served.append((start, recorder.now(),
                               f"{stage}: server, {threading.current_thread().name.split(' ')[0]}"))

    sock = listen("127.0.0.1", 0)
    module.serve_client = timed
    try:
        lines, _ = _serve_while(_THREE_CLIENTS, [str(sock.getsockname()[1]), str(CLIENT_REQUESTS),
                                                 str(CLIENT_COMPUTE_MS)], module, sock, timeout=60)
    finally:
        module.serve_client = original
    t0 = time.monotonic() - recorder.now() / 1e6   # the recorder's zero, on the same clock
    clients = [(int(number), (float(start) - t0) * 1e6, (float(end) - t0) * 1e6)
               for number, start, end in (line.split() for line in lines[:-1])]
    if len(clients) != 3:
        raise RuntimeError(f"a client of {stage} failed: {lines}")
    offset = min(start for _, start, _ in clients)   # each stage's time starts when its clients do
    spans = [(f"{CLIENT_REQUESTS} requests", start, end, f"{stage}: client {number + 1}", "client")
             for number, start, end in clients]
    spans += [("serve_client", start, end, track, "connection") for start, end, track in served]
    for name, start, end, track, cat in spans:
        tid = tracks.setdefault(track, 100 + len(tracks))
        recorder.span(name, round(start - offset, 3), round(end - offset, 3), tid=tid, cat=cat)


# -- reading a trace: cuts, and the numbers the captions quote ------------------------------


def window(trace: Trace, start: float | None = None, end: float | None = None, *, carry: bool = True) -> Trace:
    """A copy of ``trace`` cut to [``start``, ``end``] µs (None: open): events outside dropped, spans
    crossing an edge shortened to it (with ``args.clipped``), counters kept from their last value
    before ``start`` (unless ``carry`` is false), and tracks left empty no longer named.
    """
    low = -float("inf") if start is None else start
    high = float("inf") if end is None else end
    kept: list[dict[str, Any]] = []
    before: dict[str, dict[str, Any]] = {}   # each counter's last value before the window
    for event in trace["traceEvents"]:
        ph = event.get("ph")
        if ph == "M":
            kept.append(event)
            continue
        begin, finish = event["ts"], event["ts"] + event.get("dur", 0)
        if ph == "C" and begin < low:
            before[event["name"]] = event
            continue
        if finish < low or begin > high:
            continue
        if ph == "X" and (begin < low or finish > high):
            begin, finish = max(begin, low), min(finish, high)
            event = {**event, "ts": begin, "dur": round(finish - begin, 3),
                     "args": {**(event.get("args") or {}), "clipped": True}}
        kept.append(event)
    if carry:
        kept += [{**event, "ts": low} for event in before.values()]
    used = {event["tid"] for event in kept if event.get("ph") != "M"}
    kept = [event for event in kept if event.get("ph") != "M" or event.get("name") == "process_name"
            or event["tid"] in used]
    return {**trace, "traceEvents": kept}


def select_tracks(trace: Trace, tracks: tuple[str, ...] = (), counters: tuple[str, ...] | None = None) -> Trace:
    """A copy of ``trace`` with only the tracks whose names start with one of ``tracks`` (all if empty)
    and the counters whose names start with one of ``counters`` (all if None).
    """
    keep = {tid for tid, name in _track_names(trace).items() if not tracks or name.startswith(tracks)}
    return {**trace, "traceEvents": [
        event for event in trace["traceEvents"]
        if (counters is None or event["name"].startswith(counters) if event.get("ph") == "C"
            else (event.get("ph") == "M" and event.get("name") == "process_name") or event.get("tid") in keep)]}


def _events(trace: Trace, ph: str, name: str | None = None, cat: str | None = None) -> list[dict[str, Any]]:
    """The events of phase ``ph`` ("X" a span, "i" an instant), by ``name`` and ``cat`` where given, in order."""
    return [e for e in trace["traceEvents"] if e.get("ph") == ph and (name is None or e.get("name") == name)
            and (cat is None or e.get("cat") == cat)]


def _track_names(trace: Trace) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


def _end(event: dict[str, Any]) -> float:
    return event["ts"] + event.get("dur", 0)


def _around(spans: list[dict[str, Any]], *moments: float) -> list[dict[str, Any]]:
    """The spans that hold one of the ``moments`` (µs)."""
    return [e for e in spans if any(e["ts"] <= ts <= _end(e) for ts in moments)]


def _writes(trace: Trace) -> tuple[float | None, float | None]:
    """From the callback that made the first write to the end of the one that made the last."""
    writes = [e["ts"] for e in _events(trace, "i", "write")]
    around = _around(_events(trace, "X", cat="callback"), min(writes), max(writes)) if writes else []
    if not around:
        return None, None
    return min(e["ts"] for e in around) - 5, max(_end(e) for e in around) + 5


def _request_path(trace: Trace) -> tuple[float | None, float | None]:
    """From the wait that reported the request's bytes to the end of the step or phase that wrote the answer."""
    reads = [e["ts"] for e in _events(trace, "i", "read")]
    writes = [e["ts"] for e in _events(trace, "i", "write")]
    if not reads or not writes:
        return None, None
    waits = [e for e in _events(trace, "X", "wait") if e["ts"] < min(reads)]
    ends = [_end(e) for e in _around([e for e in _events(trace, "X")
                                      if e.get("name") in ("callbacks", "idle", "check")], max(writes))]
    if not waits or not ends:
        return None, None
    wait = max(waits, key=lambda e: e["ts"])
    end = max(ends)
    # The wait's end, not all of it: on a real clock it can last a thousand
    # times longer than the work, and the picture would show nothing else.
    start = max(wait["ts"], _end(wait) - max(20.0, (end - _end(wait)) * 0.25))
    # On libuv the read callback runs inside the poll phase, within the wait.
    callbacks = [e["ts"] for e in _around(_events(trace, "X", cat="callback"), min(reads))]
    return min([start, min(reads)] + callbacks) - 5, end + 5


def _stall(trace: Trace) -> tuple[float | None, float | None]:
    """From just before the longest callback to the end of the callbacks step after the wait that follows it:
    the stall, the wait that finds the others' requests, and their callbacks."""
    callbacks = _events(trace, "X", cat="callback")
    if not callbacks:
        return None, None
    longest = max(callbacks, key=lambda e: e["dur"])
    after = sorted((e for e in _events(trace, "X", "callbacks") if e["ts"] > _end(longest)), key=lambda e: e["ts"])
    if not after:
        return None, None
    end = _end(after[0])
    # To the end of that step, and not into the wait that follows it.
    following = [e["ts"] for e in _events(trace, "X", "wait") if e["ts"] >= end - 0.01]
    return longest["ts"] - 0.02 * (end - longest["ts"]), min([end + 10.0, *following]) - 0.001


def _operations(trace: Trace) -> list[dict[str, Any]]:
    """tinyloop.ring's operations that completed in ``trace``: each a span from the io_uring_enter that
    submitted it (``args.enter``, its place in that batch ``args.order``) to its CQE (``args.res``)."""
    return [e for e in _events(trace, "X", cat="operation") if (e.get("args") or {}).get("enter")]


def _operation_name(event: dict[str, Any]) -> str:
    return f"{event['name']} fd {event['args']['fd']}"


def _largest_batch(trace: Trace) -> list[dict[str, Any]]:
    """The operations of the io_uring_enter that submitted the most of those that completed (the first
    such enter), in the order it submitted them; [] if the trace has none."""
    batches: dict[int, list[dict[str, Any]]] = {}
    for event in _operations(trace):
        batches.setdefault(event["args"]["enter"], []).append(event)
    if not batches:
        return []
    enter = max(batches, key=lambda number: (len(batches[number]), -number))
    return sorted(batches[enter], key=lambda e: e["args"]["order"])


def _batch(trace: Trace) -> tuple[float | None, float | None]:
    """From the first SQE of the largest batch (prepared in a callback) to the last of its CQEs."""
    batch = _largest_batch(trace)
    if not batch:
        return None, None
    start = min(e["args"]["prepared"] for e in batch)
    end = max(_end(e) for e in batch)
    pad = max(5.0, 0.03 * (end - start))
    return start - pad, end + pad


def _batch_facts(trace: Trace) -> str:
    """What the largest batch's io_uring_enter submitted, and the order its CQEs came back in."""
    batch = _largest_batch(trace)
    enters = [e for e in _events(trace, "X", "io_uring_enter")
              if batch and (e.get("args") or {}).get("enter") == batch[0]["args"]["enter"]]
    if not enters:
        return "no batch of operations recorded."
    enter = enters[0]
    sqes = ", ".join(f"{count} {opcode}" for opcode, count in enter["args"]["sqes"].items())
    came = sorted(batch, key=_end)
    return (f"one io_uring_enter submitted {enter['args']['submitted']} SQEs ({sqes}), in this order: "
            f"{', '.join(_operation_name(e) for e in batch)}; their CQEs came back in this order: "
            + ", ".join(f"{_operation_name(e)} ({_end(e) - enter['ts']:.0f} µs after the call began)" for e in came)
            + ".")


def _connection(trace: Trace) -> list[dict[str, Any]]:
    """The first accepted connection's operations, in the order they completed: the ACCEPT whose CQE
    gave its descriptor, then every operation on that descriptor after it, up to its end of file."""
    operations = sorted(_operations(trace), key=_end)
    accept = next((e for e in operations if e["name"] == "ACCEPT" and e["args"]["res"] >= 0), None)
    if accept is None:
        return []
    life = [accept]
    for event in operations:
        if event["args"]["fd"] == accept["args"]["res"] and _end(event) > _end(accept):
            life.append(event)
            if event["name"] == "RECV" and event["args"]["res"] <= 0:
                break   # end of file (or an error): the connection's last
    return life


def _request_life(trace: Trace) -> tuple[float | None, float | None]:
    """From just before the ACCEPT's CQE to just after the connection's last CQE."""
    life = _connection(trace)
    if len(life) < 2:
        return None, None
    start, end = _end(life[0]), _end(life[-1])
    pad = max(10.0, 0.04 * (end - start))
    return start - pad, end + pad


def _life_facts(trace: Trace) -> str:
    """Each operation of the connection: what its CQE said, and how long the kernel held it."""
    life = _connection(trace)
    if not life:
        return "no accepted connection recorded."

    def result(event: dict[str, Any]) -> str:
        res = event["args"]["res"]
        if res < 0:
            return f"-{event['args'].get('error', -res)}"
        if event["name"] == "ACCEPT":
            return f"the new descriptor, {res}"
        return f"{res} bytes" + (" (end of file)" if event["name"] == "RECV" and res == 0 else "")

    enters = [e for e in _events(trace, "X", "io_uring_enter") if _end(life[0]) <= e["ts"] <= _end(life[-1])]
    steps = "; ".join(f"{_operation_name(e)}: {result(e)}" + ("" if e is life[0] else
                                                              f", {e['dur']:.0f} µs after it was submitted")
                      for e in life)
    return f"{steps}; {len(enters)} io_uring_enter calls from the accept's CQE to the last."


def _readiness_facts(trace: Trace) -> str:
    """Per server: its waits, the median wait and the median work between two, the load's length."""
    parts = []
    for tid, name in sorted(_track_names(trace).items()):
        spans = [e for e in _events(trace, "X") if e.get("tid") == tid]
        waits = [e["dur"] for e in spans if e["name"] == "wait"]
        work = [e["dur"] for e in spans if e["name"] == "handle events"]
        if waits and work:
            length = max(_end(e) for e in spans) - min(e["ts"] for e in spans)
            parts.append(f"{name.split(' ')[0]}: {len(waits)} waits, the median {statistics.median(waits):.0f} µs, "
                         f"the median work between two {statistics.median(work):.0f} µs, "
                         f"{length / 1000:.1f} ms in all")
    return "; ".join(parts) + "."


def _clients_facts(trace: Trace) -> str:
    """Per stage: when each client had its last answer, from the moment the three started."""
    names = _track_names(trace)
    parts = []
    for stage in ("blocking", "threaded"):
        ends = sorted(_end(e) for e in trace["traceEvents"] if e.get("cat") == "client"
                      and names.get(e["tid"], "").startswith(stage + ":"))
        if ends:
            parts.append(f"{stage}: the clients were done after {', '.join(f'{end / 1000:.0f}' for end in ends)} ms")
    return "; ".join(parts) + "."


def _stall_facts(trace: Trace) -> str:
    """The longest callback, and what the wait after it returned."""
    callbacks = _events(trace, "X", cat="callback")
    if not callbacks:
        return "no callback recorded."
    longest = max(callbacks, key=lambda e: e["dur"])
    after = [e for e in _events(trace, "X", "wait") if e["ts"] >= _end(longest)]
    facts = f"the longest callback, {longest['name']}, ran {longest['dur'] / 1000:.1f} ms"
    if after:
        facts += f"; the wait after it returned {min(after, key=lambda e: e['ts'])['args']['events']} ready descriptors"
    return facts + "."


FIGURES: tuple[Figure, ...] = (
    Figure("baselines-clients", "baselines", "reference", baselines_clients,
           "three clients, two 20 ms requests each: the blocking server serves them one after "
           "another, the threaded one all at once", tracks=("blocking", "threaded"), facts=_clients_facts),
    Figure("readiness-idle", "readiness", "reference", readiness_idle,
           "select against epoll beside 1,000 idle connections: each wait, the work between two, "
           "and the descriptors each wait returned", facts=_readiness_facts),
    Figure("callbacks-iteration", "callbacks", "build", callbacks_iteration,
           "two iterations of Part II's loop: wait, timers, callbacks",
           tracks=("loop",), counters=("ready queue",),
           shows=("wait", "timers", "callbacks", "call_soon_cb", "on_readable", "call_later_0", "later_300us")),
    Figure("callbacks-stall", "callbacks", "reference",
           partial(_trace_stage, "callbacks", requests=9, concurrency=3, compute_ms=50),
           "a 50 ms handler holds the loop: three clients' requests wait behind it",
           tracks=("loop",), counters=("ready descriptors",), crop=_stall, facts=_stall_facts, text=True,
           shows=("Client._on_readable", "wait", "callbacks")),
    Figure("generators-stack", "generators", "build", generators_stack,
           "the trampoline's stack of generators over time, for two tasks",
           counters=("stack depth",)),
    Figure("coroutines-tasks", "coroutines", "build", coroutines_tasks,
           "task steps, and the future each step ends awaiting", counters=(), awaits=True, text=True),
    Figure("asyncio-request", "asyncio", "build", partial(_aio_request, LAST_REQUEST, 1),
           "one request's path through tinyloop.aio's transport and protocol", counters=(),
           crop=_request_path, text=True),
    Figure("asyncio-buffered", "asyncio", "build", asyncio_buffered,
           "a 512 KiB answer: write() sends what the socket takes and buffers the rest; a writer sends it "
           "as the client reads", counters=("buffered",), crop=_writes, text=True),
    Figure("coroutines-request", "asyncio", "build", coroutines_request,
           "Part II's streams, two requests: a registration and a future for each read that waits",
           counters=(), awaits=True, text=True),
    Figure("libuv-request", "libuv", "reference", partial(_trace_stage, "uv", requests=1, concurrency=1),
           "tinyloop.uv serving one request: uv_run's phases per iteration", counters=(),
           crop=_request_path, text=True, shows=("check", "read", "write", "HTTPProtocol.data_received")),
    Figure("realworld-pipelined", "realworld", "build", partial(_aio_request, REQUEST * 23 + LAST_REQUEST, 24),
           "24 pipelined requests: one read, one parse pass, one write", counters=(),
           crop=_request_path, text=True),
    Figure("completion-batch", "completion", "reference",
           partial(_trace_stage, "ring", requests=16, concurrency=4),
           "tinyloop.ring under four keep-alive clients: the largest batch one io_uring_enter submitted, "
           "and its completions", tracks=("loop", "ACCEPT", "RECV", "SEND"), counters=("SQEs", "CQEs"),
           crop=_batch, facts=_batch_facts, shows=("io_uring_enter", "SEND", "RECV", "SQE", "CQE")),
    Figure("completion-request", "completion", "reference",
           partial(_trace_stage, "ring", requests=1, concurrency=1),
           "one request's life on tinyloop.ring, SQE to CQE: accept, receive, send, end of file",
           tracks=("loop", "ACCEPT", "RECV", "SEND"), counters=(), crop=_request_life, facts=_life_facts,
           shows=("io_uring_enter", "RECV", "SEND", "SQE", "CQE")),
)


def get(name: str) -> Figure:
    """The figure called ``name``; KeyError naming the figures otherwise."""
    for figure in FIGURES:
        if figure.name == name:
            return figure
    raise KeyError(f"no trace figure {name!r}; the figures are {', '.join(f.name for f in FIGURES)}")


def trace_of(figure: Figure) -> Trace | None:
    """The trace the book draws: made now for a ``build`` figure, read from its committed file for a
    reference one (None if that file has not been recorded)."""
    if figure.source == "build":
        return figure.make()
    return json.loads(figure.reference_file.read_text()) if figure.reference_file.exists() else None


def main(argv: list[str] | None = None) -> int:
    """Make the figures ``argv`` names; 0 if all were written, 1 if one failed, 2 for an unknown name."""
    parser = argparse.ArgumentParser(prog="python docs/_ext/trace_figures.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="figures to make (default: all; see --list)")
    parser.add_argument("--list", action="store_true", help="name the figures, with chapter and source")
    parser.add_argument("--quick", action="store_true",
                        help="only the figures traced on the virtual clock (no server, a few seconds)")
    parser.add_argument("--reference", action="store_true",
                        help="write the recorded (reference) figures into benchmarks/results/traces/")
    args = parser.parse_args(argv)
    if args.quick and args.reference:
        parser.error("--reference re-records the recorded figures: not with --quick")
    if args.list:
        for figure in FIGURES:
            print(f"{figure.name:<22} {figure.chapter:<11} {figure.source:<10} {figure.summary}")
        return 0
    try:
        chosen = [get(name) for name in args.names] if args.names else list(FIGURES)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    if args.reference or args.quick:
        chosen = [figure for figure in chosen if figure.source == ("reference" if args.reference else "build")]
    from tinyloop.trace import chrome, timeline
    out = REFERENCE if args.reference else LOCAL
    status = written = 0
    for figure in chosen:
        try:
            trace = figure.make()
            if problems := chrome.problems(trace):
                raise ValueError(f"not a valid trace: {problems[:3]}")
        except Exception as error:  # one figure's failure does not lose the others
            print(f"{figure.name}: failed: {type(error).__name__}: {error}", file=sys.stderr)
            status = 1
            continue
        path = chrome.write(trace, out / f"{figure.name}.json")
        if not args.reference:
            timeline.write_html(trace, out / f"{figure.name}.html", title=figure.summary, command=figure.command)
        print(f"{figure.name}: {_shown(path)}")
        written += 1
    print(f"trace figures: {written} of {len(chosen)} written under {_shown(out)}")
    return status


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


if __name__ == "__main__":
    raise SystemExit(main())
