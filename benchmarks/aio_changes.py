# benchmarks/aio_changes.py
"""Which of tinyloop.aio's design choices bought how much: each change against a variant that undoes it.

    python -m benchmarks.aio_changes --quick            a smoke run, under a minute
    python -m benchmarks.aio_changes --reference        the asyncio chapter's aio_changes.json and .txt (5 minutes)
    python -m benchmarks.aio_changes --profile          where a request's time goes, by layer (profile_aio.txt)
    python -m benchmarks.aio_changes --serve aio/buffered-write --port 8000   one server, by hand
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072 python -m benchmarks.aio_changes --serve aio/new-bytes-per-read
                                                        a recipe with an environment (Recipe.env): the
                                                        harness sets it, by hand you do

A *change* is a choice the code makes; its *variant* (a subclass below,
overriding one method of the loop, its transport or its handle) undoes it.
CHANGES: both servers interleaved under the same ApacheBench load
(benchmarks/run.py's ``measure``), the server's CPU time per request.
MICRO: the choices that act on one call, timed per operation by pyperf with
the garbage collector on (an object more per call costs mostly in the
collections it brings on) and off.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import math
import selectors
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks import servers
from benchmarks.harness import experiment, output, pyperf_runs, variants
from benchmarks.harness.machine import display
from benchmarks.harness.process import choose_names
from benchmarks.harness.profiling import profile_summary, profiled, serve_until_sigterm
from benchmarks.harness.render import align, footer, median_cell
from benchmarks.harness.summary import summarize
from benchmarks.loads import Load, Settings
from benchmarks.run import measure
from tinyloop import stages
from tinyloop.aio import events, selector_events
from tinyloop.aio.server import serve_on
from tinyloop.aio.unix_events import Loop
from tinyloop.callbacks import loop as reactor
from tinyloop.http import HTTPConnection

REQUESTS = {"ab-k-c10": 30000, "ab-c10": 10000, "ab-k-c1": 5000}  # ab's -n per load (--quick: 200)
WARMUP = 1000  # keep-alive GET / before each load (--quick: 20)
TIMEOUT = 5.0  # ab's -s, seconds

# -- The variants: each class undoes one change, and its docstring says which ----------

class BufferedWriteTransport(selector_events._SelectorSocketTransport):
    """write() always buffers and waits for writability, as a first transport would.

    Undoes "try first, wait second": an add_writer, one more iteration, a remove_writer.
    """

    def write(self, data: Any) -> None:
        if not data or self._conn_lost:
            return
        if not self._buffer:
            self._loop._add_writer(self._sock_fd, self._write_ready)
        self._buffer.append(bytes(data))
        self._buffer_size += len(data)
        self._maybe_pause_protocol()


class BufferedWriteLoop(Loop):
    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return BufferedWriteTransport(self, sock, protocol, waiter, extra, server)


class NewBytesPerReadTransport(selector_events._SelectorSocketTransport):
    """Each read is ``sock.recv(max_size)``: a new 256 KiB bytes object shrunk to what came, as asyncio reads.

    Undoes "every read goes into the loop's one buffer, its bytes copied out".
    """

    def _read_ready__data_received(self):
        if self._conn_lost:
            return
        try:
            data = self._sock.recv(self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")


class NewBytesPerReadLoop(Loop):
    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return NewBytesPerReadTransport(self, sock, protocol, waiter, extra, server)


class TaskPerConnectionLoop(Loop):
    """A task per accepted connection, as asyncio's _accept_connection2 (3.11-3.13) makes.

    Undoes "a plain TCP connection is set up in the accept callback".
    """

    def _accept_plain(self, protocol_factory, conn, extra, server):
        self.create_task(self._accept_connection2(protocol_factory, conn, extra, server))

    async def _accept_connection2(self, protocol_factory, conn, extra, server):
        transport = None
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            transport = self._make_socket_transport(conn, protocol, waiter, extra=extra, server=server)
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            if transport is None:
                conn.close()
            else:
                transport.close()


class PeernameSyscallLoop(Loop):
    """The transport asks the kernel for the peer's address (getpeername(2)).

    Undoes "the address accept(2) returned is handed to the transport".
    """

    def _accept_plain(self, protocol_factory, conn, extra, server):
        super()._accept_plain(protocol_factory, conn, {}, server)


class NagleLoop(Loop):
    """TCP_NODELAY left off: Nagle's algorithm may hold a small write back."""

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        transport = super()._make_socket_transport(sock, protocol, waiter, extra=extra, server=server)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)  # before connection_made, a callback
        return transport


class CheckedCallSoonLoop(Loop):
    """call_soon checks its callback on every call: tinyloop.aio's first call_soon.

    Undoes "the checks run in debug mode only", as asyncio 3.11-3.13 do.
    """

    def call_soon(self, callback, *args, context=None):
        self._check_callback(callback, "call_soon")
        if self._debug:
            self._check_thread()
        handle = events.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle


class SuperInitHandle(events.Handle):
    """Part II's fields set through Part II's __init__ (a super() call per handle)."""

    __slots__ = ()

    def __init__(self, callback, args, loop, context=None):
        self._context = contextvars.copy_context() if context is None else context
        super(events.Handle, self).__init__(callback, args, loop)


class TupleHandle(events.Handle):
    """The first design: ``_callback = context.run``, ``_args = (callback, *args)``.

    Part II's _run then calls ``context.run(callback, *args)``: a tuple and a bound method per handle.
    """

    __slots__ = ()

    def __init__(self, callback, args, loop, context=None):
        self._context = context = contextvars.copy_context() if context is None else context
        self._callback = context.run
        self._args = (callback, *args)
        self._cancelled = False
        self._loop = loop
        self._repr = None

    _run = reactor.Handle._run


class FirstDesignHandle(TupleHandle):
    """The handle as first written: the tuple, and the fields set by super().__init__()."""

    __slots__ = ()

    def __init__(self, callback, args, loop, context=None):
        self._context = context = contextvars.copy_context() if context is None else context
        super(events.Handle, self).__init__(context.run, (callback, *args), loop)


def _loop_with_handle(handle: type) -> type:
    """A Loop whose call_soon makes ``handle``s: base_events' call_soon with that one name changed
    (it names its Handle class directly, a global lookup cheaper than self.handle_class)."""

    class HandleLoop(Loop):
        handle_class = handle  # add_reader's and add_writer's handles too

        def call_soon(self, callback, *args, context=None):
            if self._closed:
                self._check_closed()
            if self._debug:
                self._check_thread()
                self._check_callback(callback, "call_soon")
            new = handle(callback, args, self, context)
            self._ready.append(new)
            return new

    HandleLoop.__name__ = HandleLoop.__qualname__ = f"{handle.__name__}Loop"
    return HandleLoop


SuperInitLoop = _loop_with_handle(SuperInitHandle)
TupleHandleLoop = _loop_with_handle(TupleHandle)
FirstDesignLoop = _loop_with_handle(FirstDesignHandle)


class LeanEpollSelector(selectors.EpollSelector):
    """selectors' epoll select() without its bookkeeping (no max(len(...)) per call, no
    ``_key_from_fd`` call per event): prices the wrapper tinyloop keeps, the standard
    library's one interface to select, poll, epoll and kqueue."""

    def select(self, timeout=None):
        if timeout is None:
            timeout = -1
        elif timeout <= 0:
            timeout = 0
        else:
            timeout = math.ceil(timeout * 1e3) * 1e-3
        try:
            fd_events = self._selector.poll(timeout)
        except InterruptedError:
            return []
        get = self._fd_to_key.get
        ready = []
        for fd, event in fd_events:
            key = get(fd)
            if key is not None:
                mask = ((event & ~_EPOLLIN and selectors.EVENT_WRITE)
                        | (event & ~_EPOLLOUT and selectors.EVENT_READ))
                ready.append((key, mask & key.events))
        return ready


_EPOLLIN, _EPOLLOUT = selectors.select.EPOLLIN, selectors.select.EPOLLOUT  # type: ignore[attr-defined]


class LeanSelectLoop(Loop):
    def __init__(self, selector=None, *args, **kwargs):
        super().__init__(selector if selector is not None else LeanEpollSelector(), *args, **kwargs)


# -- Part II's way on this loop: sock_recv, a reader added and removed per read ------

async def _handle_sock(conn: socket.socket) -> None:
    """One connection with loop.sock_recv/sock_sendall: no transport, Part II's pattern."""
    loop = asyncio.get_running_loop()
    http = HTTPConnection()
    try:
        while not http.should_close:
            data = await loop.sock_recv(conn, 65536)
            out = http.receive_data(data)
            if out:
                await loop.sock_sendall(conn, out)
            if not data:
                break
    except ConnectionError:
        pass
    finally:
        conn.close()


async def _serve_sock(listener: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    tasks: set[asyncio.Task] = set()  # held until done; asyncio.Runner cancels the rest on the way out
    while True:
        conn, _ = await loop.sock_accept(listener)
        task = loop.create_task(_handle_sock(conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


# -- The servers ------------------------------------------------------------------------

class Recipe(NamedTuple):
    """A server: ``loop`` makes the loop; ``api``: "protocol", "streams" or "sock"; ``env``: added
    to its environment."""

    loop: Callable[[], asyncio.AbstractEventLoop]
    api: str
    summary: str
    env: dict[str, str] | None = None


# glibc's mmap threshold held at its default, 128 KiB (mallopt(3)): fixed, it no longer rises
# when a large block is freed whole, so a 256 KiB read is served by mmap(2) in every process,
# not only in those that have not yet freed one.
FIXED_THRESHOLD = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}


def _first_line(cls: type) -> str:
    return (cls.__doc__ or "").split("\n")[0]


RECIPES: dict[str, Recipe] = {
    "aio": Recipe(Loop, "protocol", "tinyloop.aio.Loop, HTTPProtocol (the aio stage)"),
    "aio-streams": Recipe(Loop, "streams", "tinyloop.aio.Loop, asyncio streams (the aio-streams stage)"),
    "asyncio-protocol": Recipe(asyncio.new_event_loop, "protocol", "stdlib asyncio, HTTPProtocol"),
    "aio-sock": Recipe(Loop, "sock", "tinyloop.aio.Loop, a task per connection on sock_recv/sock_sendall "
                                     "(Part II's pattern: try, else add_reader, await, remove_reader)"),
    "aio/buffered-write": Recipe(BufferedWriteLoop, "protocol", _first_line(BufferedWriteTransport)),
    "aio/fixed-threshold": Recipe(Loop, "protocol", "the aio stage, glibc's mmap threshold held at 128 KiB",
                                  FIXED_THRESHOLD),
    "aio/new-bytes-per-read": Recipe(NewBytesPerReadLoop, "protocol", _first_line(NewBytesPerReadTransport)
                                     + "; glibc's mmap threshold held at 128 KiB", FIXED_THRESHOLD),
    "aio/new-bytes-per-read/free": Recipe(NewBytesPerReadLoop, "protocol", _first_line(NewBytesPerReadTransport)
                                          + "; glibc's mmap threshold left free to rise"),
    "aio/task-per-connection": Recipe(TaskPerConnectionLoop, "protocol", _first_line(TaskPerConnectionLoop)),
    "aio/getpeername": Recipe(PeernameSyscallLoop, "protocol", _first_line(PeernameSyscallLoop)),
    "aio/nagle": Recipe(NagleLoop, "protocol", _first_line(NagleLoop)),
    "aio/lean-select": Recipe(LeanSelectLoop, "protocol", "selectors' epoll select() without its bookkeeping"),
    "aio-streams/checked-call-soon": Recipe(CheckedCallSoonLoop, "streams", _first_line(CheckedCallSoonLoop)),
    "aio-streams/super-init": Recipe(SuperInitLoop, "streams", _first_line(SuperInitHandle)),
    "aio-streams/tuple-handle": Recipe(TupleHandleLoop, "streams", _first_line(TupleHandle)),
}


def serve(name: str, port: int, profile_to: str | None = None) -> int:
    """Serve HTTP with recipe ``name`` until SIGTERM or Ctrl-C (under cProfile with ``profile_to``)."""
    recipe = RECIPES[name]
    main = _serve_sock if recipe.api == "sock" else functools.partial(serve_on, api=recipe.api)
    return serve_until_sigterm(name, recipe.loop, main, port, profile_to)


def server(name: str) -> servers.Server:
    """The harness's Server for ``name``: ``stage:NAME`` is ``python -m tinyloop serve NAME``."""
    if name.startswith("stage:"):
        return replace(servers.stage_server(stages.get(name.partition(":")[2])), name=name)
    argv = (sys.executable, "-m", "benchmarks.aio_changes", "--serve", name, "--port", "0")
    return servers.Server(name, "variant", RECIPES[name].summary, argv, env=RECIPES[name].env or {})


# -- The changes: servers x loads ----------------------------------------------------------------

LOADS: dict[str, Load] = {load.name: load for load in (
    Load("ab-k-c10", "ab", 10, True, "ab -k -c 10", "10 keep-alive connections, one request in flight on each"),
    Load("ab-c10", "ab", 10, False, "ab -c 10", "a new connection per request, 10 at a time"),
    Load("ab-k-c1", "ab", 1, True, "ab -k -c 1", "one keep-alive connection, one request at a time: latency"),
)}


@dataclass(frozen=True)
class Change:
    """One row: ``real`` does ``change``, ``undone`` does ``variant`` instead, under ``load``;
    ``figure`` is the run record's key the row compares (CPU µs per request, or p50 in ms)."""

    key: str
    change: str
    variant: str
    load: str
    real: str
    undone: str
    figure: str = "cpu_us_per_req"


CHANGES: tuple[Change, ...] = (
    Change("transport", "a transport: one registration per connection, data_received (aio-streams)",
           "Part II's streams: recv tried first, add_reader/remove_reader around each wait (coroutines)",
           "ab-k-c10", "stage:aio-streams", "stage:coroutines"),
    Change("transport-same-loop", "a transport under asyncio's streams (aio-streams)",
           "loop.sock_recv/sock_sendall on the same loop: a coroutine per call, a reader added and "
           "removed around each wait",
           "ab-k-c10", "aio-streams", "aio-sock"),
    Change("write-now", "write() tries send() at once",
           "write() always buffers and waits for writability (add_writer, one more iteration)",
           "ab-k-c10", "aio", "aio/buffered-write"),
    Change("loop-buffer", "every read into the loop's one buffer, its bytes copied out (both servers with "
           "glibc's mmap threshold held at 128 KiB)",
           "recv(max_size): a new 256 KiB bytes object per read, shrunk to what came (asyncio's read)",
           "ab-k-c10", "aio/fixed-threshold", "aio/new-bytes-per-read"),
    Change("loop-buffer/free", "the same, glibc's mmap threshold left free (glibc's default behaviour)",
           "recv(max_size) per read, the threshold free to rise when a large block is freed whole",
           "ab-k-c10", "aio", "aio/new-bytes-per-read/free"),
    Change("no-task-accept", "a plain TCP connection set up in the accept callback",
           "a task per accepted connection, as asyncio's _accept_connection2",
           "ab-c10", "aio", "aio/task-per-connection"),
    Change("peername", "the peer's address from accept() handed to the transport",
           "the transport asks getpeername(2)", "ab-c10", "aio", "aio/getpeername"),
    Change("debug-checks", "call_soon checks the callback in debug mode only (as asyncio 3.11-3.13)",
           "call_soon checks it on every call (tinyloop.aio's first version)",
           "ab-k-c10", "aio-streams", "aio-streams/checked-call-soon"),
    Change("init-fields", "Handle.__init__ sets Part II's fields itself",
           "through super().__init__()", "ab-k-c10", "aio-streams", "aio-streams/super-init"),
    Change("no-tuple", "a Handle keeps callback and args; its _run calls context.run(callback, *args)",
           "callback = context.run, args = (callback, *args): a tuple and a bound method per handle",
           "ab-k-c10", "aio-streams", "aio-streams/tuple-handle"),
    Change("selectors", "selectors' EpollSelector.select()",
           "the same select() without its bookkeeping (a variant that prices the wrapper)",
           "ab-k-c10", "aio", "aio/lean-select"),
    Change("nodelay", "TCP_NODELAY on every TCP transport (Nagle off)", "Nagle left on",
           "ab-k-c1", "aio", "aio/nagle", figure="p50_ms"),
)


def run_servers(settings: Settings, repeat: int, warmup: int, pinning: dict) -> list[dict]:
    """Every (load, server) of CHANGES, ``repeat`` times interleaved; the run records."""
    cells = list(dict.fromkeys((c.load, name) for c in CHANGES for name in (c.real, c.undone)))
    with tempfile.TemporaryDirectory(prefix="tinyloop-aio-changes-") as workdir:
        return experiment.interleave(
            cells, repeat, lambda cell: measure(server(cell[1]), LOADS[cell[0]], settings, pinning, Path(workdir),
                                                warmup),
            lambda cell: f"{cell[0]:<9} {cell[1]:<32}",
            lambda r: f"{r['cpu_us_per_req']:.1f} µs/req  p50 {r['p50_ms']:.3f} ms  {r['rps']:.0f} req/s")


def _compare(row: dict) -> dict:
    """``row`` with ratio (variant / real), saved (variant - real) and overlap (of the min-max ranges)."""
    real, undone = row["with"], row["without"]
    if real.get("median") is None or undone.get("median") is None:
        return {**row, "ratio": None, "saved": None, "overlap": None}
    return {**row, "ratio": undone["median"] / real["median"] if real["median"] else None,
            "saved": undone["median"] - real["median"],
            "overlap": real["min"] <= undone["max"] and undone["min"] <= real["max"]}


def change_rows(records: list[dict]) -> list[dict]:
    """One row per change: median, min and max of its figure for the real and the undone server."""
    folded = experiment.fold(records, "load", "server", ["cpu_us_per_req", "p50_ms", "rps", "faults_per_req"])
    rows = []
    for change in CHANGES:
        row: dict = {**asdict(change), "unit": "µs" if change.figure == "cpu_us_per_req" else "ms"}
        for side, name in (("with", change.real), ("without", change.undone)):
            summary = folded[change.load][name]
            low, high = summary["spread"][change.figure] or (None, None)
            row[side] = {"median": summary[change.figure], "min": low, "max": high, "runs": summary["runs"],
                         "ok_runs": summary["ok_runs"], "rps": summary["rps"],
                         "faults_per_req": summary["faults_per_req"], "note": summary["note"]}
        rows.append(_compare(row))
    return rows


# -- Per operation, timed by pyperf ---------------------------------------------------------------

def _noop(arg: object) -> None:
    pass


class _CPUTime:
    """The CPU seconds of the ``with`` block, the garbage collector on (as a program runs) or off."""

    def __init__(self, gc_on: bool) -> None:
        self.gc_on = gc_on

    def __enter__(self) -> _CPUTime:
        gc.collect()
        if not self.gc_on:
            gc.disable()
        self.start = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.process_time() - self.start
        gc.enable()


def time_call_soon(loops: int, loop_class: type, gc_on: bool, *, batch: int) -> float:
    """CPU seconds of ``loops`` batches of ``batch`` ``call_soon(f, arg, context=ctx)`` and one
    run_once each: the shape of a Future's done callback, on a loop that is not running."""
    with contextlib.closing(loop_class()) as loop:
        context = contextvars.copy_context()
        call_soon, run_once = loop.call_soon, loop.run_once
        for _ in range(batch):  # warm: the first batch
            call_soon(_noop, None, context=context)
        run_once()
        with _CPUTime(gc_on) as timed:
            for _ in range(loops):
                for _ in range(batch):
                    call_soon(_noop, None, context=context)
                run_once()
    return timed.seconds


@contextlib.contextmanager
def _watching(subject: type, ready: int = 10) -> Iterator[Any]:
    """A ``subject()``, a loop (a no-op reader on each) or a selector, watching ``ready``
    non-blocking sockets that each have a byte to read (left unread: level-triggered, ready)."""
    pairs = [socket.socketpair() for _ in range(ready)]
    try:
        with contextlib.closing(subject()) as watcher:
            for a, b in pairs:
                a.setblocking(False)
                b.send(b"x")
                if isinstance(watcher, selectors.BaseSelector):
                    watcher.register(a, selectors.EVENT_READ)
                else:
                    watcher._add_reader(a.fileno(), _noop, None)
            yield watcher
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()


def time_iteration(loops: int, loop_class: type, gc_on: bool) -> float:
    """CPU seconds of ``loops`` run_once with 10 readable sockets, a no-op reader on each."""
    with _watching(loop_class) as loop:
        loop.run_once()
        with _CPUTime(gc_on) as timed:
            for _ in range(loops):
                loop.run_once()
    return timed.seconds


def time_select(loops: int, selector_class: type, gc_on: bool) -> float:
    """CPU seconds of ``loops`` select(0) on a ``selector_class`` with 10 ready sockets."""
    with _watching(selector_class) as selector, _CPUTime(gc_on) as timed:
        for _ in range(loops):
            selector.select(0)
    return timed.seconds


class Operation(NamedTuple):
    """What a per-operation row times: ``timing(loops, subject, gc_on)`` returns seconds,
    each loop being ``inner`` operations."""

    name: str
    timing: Callable[..., float]
    inner: int | None = None


# The collector runs when tracked allocations minus frees pass gc.get_threshold()[0]
# (700): never with 100 callbacks a batch, about once a batch of 1000 with one object
# per handle and twice with three (handle, tuple, bound method).  So the handle rows
# are timed at both sizes, and the JSON counts the collections.
CALL_SOON_100 = Operation("call_soon + run, 100 a batch", functools.partial(time_call_soon, batch=100), 100)
CALL_SOON_1000 = Operation("call_soon + run, 1000 a batch", functools.partial(time_call_soon, batch=1000), 1000)
ITERATION = Operation("run_once, 10 ready sockets", time_iteration)
SELECT = Operation("select(0), 10 ready sockets", time_select)


@dataclass(frozen=True)
class MicroChange:
    """A per-operation row: ``op`` timed on ``real`` (a loop or selector class) and on ``undone``."""

    key: str
    change: str
    variant: str
    op: Operation
    real: type
    undone: type


_TUPLE = ("separate fields, _run calls context.run(callback, *args)", "callback = context.run, args = (callback, *args)")
_FIRST = ("the Handle as it is now", "the Handle as first written: tuple and super()")
_LEAN = ("selectors' EpollSelector.select()", "without its bookkeeping")
MICRO: tuple[MicroChange, ...] = (
    MicroChange("debug-checks", "call_soon checks the callback in debug mode only", "checks it on every call",
                CALL_SOON_100, Loop, CheckedCallSoonLoop),
    MicroChange("init-fields", "Handle.__init__ sets Part II's fields itself", "through super().__init__()",
                CALL_SOON_100, Loop, SuperInitLoop),
    MicroChange("no-tuple", *_TUPLE, CALL_SOON_100, Loop, TupleHandleLoop),
    MicroChange("no-tuple/1000", *_TUPLE, CALL_SOON_1000, Loop, TupleHandleLoop),
    MicroChange("first-handle", *_FIRST, CALL_SOON_100, Loop, FirstDesignLoop),
    MicroChange("first-handle/1000", *_FIRST, CALL_SOON_1000, Loop, FirstDesignLoop),
    MicroChange("selectors", *_LEAN, ITERATION, Loop, LeanSelectLoop),
    MicroChange("selectors-alone", *_LEAN, SELECT, selectors.EpollSelector, LeanEpollSelector),
)


def _timing_name(op: Operation, subject: type, gc_on: bool) -> str:
    return f"{op.name} [{subject.__name__}]" + ("" if gc_on else " gc off")


# pyperf's table (benchmarks/harness/pyperf_runs.py): every (operation, class, gc) once.
TIMINGS = [pyperf_runs.Timing(name, op.timing, (subject, gc_on), op.inner) for name, (op, subject, gc_on) in {
    _timing_name(m.op, subject, gc_on): (m.op, subject, gc_on)
    for m in MICRO for subject in (m.real, m.undone) for gc_on in (True, False)}.items()]


def collections_per_10k(op: Operation, subject: type, ops: int = 100_000) -> float:
    """How many times the collector ran per 10,000 operations (one untimed pass of ``ops``)."""
    started = []
    counter = lambda phase, info: started.append(1) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(counter)
    try:
        op.timing(max(1, ops // (op.inner or 1)), subject, True)
    finally:
        gc.callbacks.remove(counter)
    return (len(started) - 1) * 10_000 / ops  # not _CPUTime's own gc.collect() before the timed region


def measure_micro(options: list[str], cpu: int | None) -> list[dict]:
    """Every MICRO row's real and undone timing, gc on and off, by pyperf; medians in ns per operation."""
    print(f"  per operation: {len(TIMINGS)} pyperf benchmarks", file=sys.stderr, flush=True)
    values = pyperf_runs.run("benchmarks.aio_changes:TIMINGS", [t.name for t in TIMINGS], options, cpu=cpu)
    rows = []
    for m in MICRO:
        row: dict = {"key": m.key, "change": m.change, "variant": m.variant, "op": m.op.name, "unit": "ns"}
        for side, subject in (("with", m.real), ("without", m.undone)):
            on, off = ([v * 1e9 for v in values[_timing_name(m.op, subject, gc_on)]] for gc_on in (True, False))
            row[side] = {**summarize(on), "median_gc_off": statistics.median(off), "samples": on,
                         "samples_gc_off": off, "collections_per_10k_ops": collections_per_10k(m.op, subject)}
        row = _compare(row)
        row["saved_gc_off"] = row["without"]["median_gc_off"] - row["with"]["median_gc_off"]
        rows.append(row)
    return rows


# -- Rendering -----------------------------------------------------------------------------------

def _compared(row: dict, digits: int) -> list[str]:
    """A row's cells both tables show: with the change, the variant (median (min-max)), their
    ratio (starred where the ranges overlap) and what the variant costs."""
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}" + ("*" if row["overlap"] else " ")
    saved = "-" if row["saved"] is None else f"{row['saved']:+.{digits}f}"
    return [median_cell(row["with"], digits), median_cell(row["without"], digits), ratio, saved]


def render(data: dict) -> str:
    """The JSON's two tables and their legend, as text (the chapter includes its first lines)."""
    out = [f"Per request: the server's CPU time / requests answered, median of {data['settings']['repeat']} "
           f"interleaved runs (min-max); server on one CPU, ab on the other; page faults: the server's",
           "minor faults per request (proc(5)), median, with the change/variant.", ""]
    rows = [[row["key"], LOADS[row["load"]].title, "CPU µs/req" if row["unit"] == "µs" else "p50 ms",
             *_compared(row, 1 if row["unit"] == "µs" else 3),
             "/".join(f"{row[side]['rps']:.0f}" if row[side].get("rps") else "-" for side in ("with", "without")),
             "/".join("-" if row[side].get("faults_per_req") is None else f"{row[side]['faults_per_req']:.2f}"
                      for side in ("with", "without"))]
            for row in data["rows"]]
    out += align(["change", "load", "figure", "with the change", "variant", "ratio", "variant costs",
                  "req/s with/variant", "page faults/req"], rows)
    if data["micro"]:
        out += ["", f"Per operation, in one process on one CPU: ns of CPU time, median of "
                    f"{data['settings']['micro_values']} (min-max), garbage collector on; \"gc off\": what the variant",
                "costs with it disabled; collections: how often the collector ran, with the change/variant.", ""]
        rows = [[row["key"], row["op"], *_compared(row, 0), f"{row['saved_gc_off']:+.0f}",
                 f"{row['with']['collections_per_10k_ops']:.0f}/{row['without']['collections_per_10k_ops']:.0f}"]
                for row in data["micro"]]
        out += align(["change", "operation", "with the change", "variant", "ratio", "variant costs",
                      "gc off", "collections/10k ops"], rows)
    out += ["", "* the two min-max ranges overlap: the difference is within the run-to-run spread.",
            "", "The changes (what tinyloop.aio does / the variant that undoes it, a subclass in "
                "benchmarks/aio_changes.py):"]
    first: dict[str, dict] = {}
    for row in [*data["rows"], *data["micro"]]:
        first.setdefault(row["key"], row)
    for key, row in first.items():
        named = f" [{row['real']} / {row['undone']}]" if "load" in row else ""
        out += [f"  {key}: {row['change']}", f"  {' ' * len(key)}  variant: {row['variant']}{named}"]
    return "\n".join([*out, "", footer(data)]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: how many design choices cost less than their undoing, beyond the noise."""
    rows = [row for row in [*data["rows"], *data["micro"]] if row["ratio"] is not None]
    if not rows:
        return "aio_changes: nothing measured"
    # Lower is better for every figure here (µs per request, p50 ms, ns per operation).
    better = [row["key"] for row in rows if row["with"]["max"] < row["without"]["min"]]
    return (f"aio_changes: {len(better)} of {len(rows)} rows show the design choice cheaper than its undoing "
            f"beyond the noise (min-max apart): {', '.join(better) or 'none'}")


# -- The profile and the command line ------------------------------------------------------------

def profile_server(name: str, requests: int, pinning: dict, warmup: int) -> str:
    """Profile recipe ``name`` under ``ab -k -n REQUESTS -c 10`` after ``warmup`` GET /; the text by layer."""
    settings = Settings(requests={"ab-k-c10": requests}, duration=1.0, socket_timeout=TIMEOUT, run_timeout=300.0)
    stats, served = profiled(name, server(name).argv, pinning, warmup,
                             lambda process: variants.run_load(LOADS["ab-k-c10"], settings, process.port, pinning))
    return profile_summary(stats, served, f"{name} ({RECIPES[name].summary}): {warmup} GET / to warm up, "
                                          f"then ab -k -n {requests} -c 10")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = experiment.parser("aio_changes", __doc__, repeat=5)
    parser.add_argument("--requests", type=int, help="ab's -n for every load (default " + ", ".join(
        f"{k}={v}" for k, v in REQUESTS.items()) + "; --quick 200)")
    variants.add_arguments(parser, sorted(RECIPES), "aio,aio-streams,aio-sock,asyncio-protocol",
                           "under ab -k -c 10, by layer, into profile_aio.txt")
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.port, args.profile_to)
    out = output.json_path(parser, args, "aio_changes.json")
    pinning = experiment.pinning(args)
    warmup = 20 if args.quick else WARMUP
    requests = {name: args.requests or (200 if args.quick else n) for name, n in REQUESTS.items()}
    if args.profile:
        text = "\n".join(profile_server(name, requests["ab-k-c10"], pinning, warmup)
                         for name in choose_names(args.profile, list(RECIPES), "server", []))
        return variants.write_profile(text, "aio_changes", argv, out.with_name("profile_aio.txt"))
    repeat = args.repeat or (1 if args.quick else 5)
    options, cpu = variants.pyperf_settings(args, pinning)
    settings = Settings(requests=requests, duration=1.0, socket_timeout=TIMEOUT, run_timeout=120.0)
    clock = experiment.Clock()
    records = [] if args.no_servers else run_servers(settings, repeat, warmup, pinning)
    micro = [] if args.no_micro else measure_micro(options, cpu)
    data = experiment.document(
        "aio_changes", argv, clock, pinning=pinning, tools={"ab": servers.tool_versions().get("ab")},
        settings={"quick": args.quick, "repeat": repeat, "requests": requests, "warmup_requests": warmup,
                  "socket_timeout_s": TIMEOUT, "pyperf": options,
                  "micro_values": len(micro[0]["with"]["samples"]) if micro else None,  # pyperf's per figure
                  "gc": "on (and off, for the gc off column)",
                  "cpu_source": "the server process's CPU-time clock (benchmarks/run.py)"},
        loads={name: asdict(load) for name, load in LOADS.items()},
        servers={name: {"summary": server(name).summary, "command": display(server(name).argv)}
                 for name in dict.fromkeys(n for c in CHANGES for n in (c.real, c.undone))},
        rows=change_rows(records) if records else [], micro=micro, runs=records)
    return experiment.conclude(data, out, clock, render, conclusion)


if __name__ == "__main__":
    sys.exit(main())
