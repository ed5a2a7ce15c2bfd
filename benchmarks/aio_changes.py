# benchmarks/aio_changes.py
"""Which of tinyloop.aio's design choices bought how much: each change against a variant that undoes it.

    python benchmarks/aio_changes.py                     every change, 5 interleaved repetitions (about 5 minutes)
    python benchmarks/aio_changes.py --reference         the same, written where the book reads it
    python benchmarks/aio_changes.py --changes write-now,no-task-accept --repeat 3
    python benchmarks/aio_changes.py --profile           where a request's time goes, by layer
    python benchmarks/aio_changes.py --serve aio/buffered-write --port 8000   one server, by hand

A *change* is a choice the code makes (``write()`` tries ``send()`` at once;
no task per accepted connection; ...).  Each is priced by a *variant* that
undoes it: a subclass, defined below, that overrides one method of the real
loop, its transport or its handle.  The real server and the variant run side
by side in the same run, under the same load from ApacheBench, and the
figure is the server's own CPU time per request (benchmarks/README.md, "How
to read CPU µs/request").  The choices that act on one call rather than on a
request (the handle, the callback check, the selector) are also timed per
operation, in this process.

Writes benchmarks/results/local/aio_changes.json and .txt (ignored by git);
``--reference`` writes benchmarks/results/aio_changes.json and .txt, which
the asyncio chapter shows.  ``--profile`` writes profile_aio.txt the same way.
"""

# Rules this file keeps:
#   * A variant is a subclass that overrides one method (two where the first
#     design needs both); nothing in tinyloop/ is patched, and the real loop
#     is tinyloop.aio.Loop itself, served by the same code as its variants.
#   * The harness is benchmarks/run.py's: its ``measure`` starts a fresh
#     server, warms it up, runs ab, and reads the server's CPU clock; its
#     pinning puts the server on one CPU and ab on another.  Repetitions are
#     interleaved and every figure is a median, with its min and max.
#   * Per-operation timings leave the garbage collector on: an object more
#     per call costs mostly in the collections it brings on.  The same
#     timing with gc disabled is recorded beside it, to show that share.
#   * The JSON holds every run and everything the tables show; the text
#     table is rendered from the JSON and nothing else.

from __future__ import annotations

import argparse
import asyncio
import collections
import contextvars
import cProfile
import functools
import gc
import json
import math
import os
import pstats
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make ``benchmarks`` and ``tinyloop`` importable

from benchmarks import run as http_run  # noqa: E402
from benchmarks.harness.machine import display, fingerprint  # noqa: E402
from benchmarks.harness.process import choose_pinning, warm_up  # noqa: E402
from benchmarks.harness.summary import median_range  # noqa: E402
from benchmarks import servers  # noqa: E402
from benchmarks.fairness import SYSCALLS  # noqa: E402
from benchmarks.loads import Load, Settings  # noqa: E402
from tinyloop import stages  # noqa: E402
from tinyloop.aio import events, selector_events  # noqa: E402
from tinyloop.aio.server import serve_on  # noqa: E402
from tinyloop.aio.unix_events import Loop  # noqa: E402
from tinyloop.callbacks import loop as reactor  # noqa: E402
from tinyloop.http import HTTPConnection  # noqa: E402
from tinyloop.serving import announce, listen  # noqa: E402
from tinyloop.testing import ServerProcess  # noqa: E402

SCHEMA = 1
RESULTS = ROOT / "benchmarks" / "results"
REFERENCE = RESULTS / "aio_changes.json"             # the book's; only --reference writes it
LOCAL = RESULTS / "local" / "aio_changes.json"       # a user's run: ignored by git
PROFILE_REFERENCE = RESULTS / "profile_aio.txt"
PROFILE_LOCAL = RESULTS / "local" / "profile_aio.txt"

DEFAULTS = {"repeat": 5, "warmup": 1000, "micro_repeat": 15, "micro_ops": 100_000,
            "requests": {"ab-k-c10": 30000, "ab-c10": 10000, "ab-k-c1": 5000}}


# -- The variants --------------------------------------------------------------------
#
# Each class below undoes one change, and its docstring says which.

class BufferedWriteTransport(selector_events._SelectorSocketTransport):
    """write() always buffers and waits for writability, as a first transport would.

    Undoes "try first, wait second": every response costs an add_writer
    (epoll_ctl), one more loop iteration to be sent, and a remove_writer.
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


class NagleTransport(selector_events._SelectorSocketTransport):
    """TCP_NODELAY left off: Nagle's algorithm may hold a small write back."""

    def __init__(self, loop, sock, protocol, waiter=None, extra=None, server=None):
        super().__init__(loop, sock, protocol, waiter, extra, server)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)


class NagleLoop(Loop):
    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return NagleTransport(self, sock, protocol, waiter, extra, server)


class CheckedCallSoonLoop(Loop):
    """call_soon checks its callback on every call: tinyloop.aio's first call_soon.

    Undoes "the checks run in debug mode only".  asyncio 3.11, 3.12 and 3.13
    all check in debug mode only (``_check_closed()`` always, then
    ``if self._debug: _check_thread(); _check_callback()``).
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

    Part II's _run, unchanged, then calls ``context.run(callback, *args)``;
    the price is a tuple and a bound method per handle.  The fields are set
    directly, so this prices the tuple alone (FirstDesignHandle adds super()).
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


# Discussion: base_events.call_soon names its Handle class directly (a global
# lookup is cheaper than self.handle_class, and call_soon is hot), so a
# variant handle needs a call_soon of its own.  It is base_events' body with
# that one name changed; a copy on purpose, so that the handle is the only
# difference between the rows.

def _loop_with_handle(handle: type) -> type:
    """A Loop whose call_soon makes ``handle``s: base_events' call_soon, one name changed."""

    class HandleLoop(Loop):
        handle_class = handle

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
    """selectors' epoll select(), minus its bookkeeping: no max(len(...)) per call, no
    ``_key_from_fd`` method call per event.  What is left is what any loop must do.

    Not a change we made: it prices the selectors module's wrapper, which
    tinyloop keeps because it is the standard library's one interface to
    select, poll, epoll and kqueue.
    """

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
    tasks: set[asyncio.Task] = set()
    try:
        while True:
            conn, _ = await loop.sock_accept(listener)
            task = loop.create_task(_handle_sock(conn))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        for task in tasks:
            task.cancel()


# -- The servers ------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """A server this script runs: ``loop`` makes the event loop, ``api`` is
    ``"protocol"`` (HTTPProtocol), ``"streams"`` (handle_stream) or ``"sock"``."""

    name: str
    loop: Callable[[], asyncio.AbstractEventLoop]
    api: str
    summary: str


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("aio", Loop, "protocol", "tinyloop.aio.Loop, HTTPProtocol (the aio stage)"),
    Recipe("aio-streams", Loop, "streams", "tinyloop.aio.Loop, asyncio streams (the aio-streams stage)"),
    Recipe("asyncio-protocol", asyncio.new_event_loop, "protocol", "stdlib asyncio, HTTPProtocol"),
    Recipe("aio-sock", Loop, "sock", "tinyloop.aio.Loop, a task per connection on sock_recv/sock_sendall "
                                     "(Part II's pattern: try, else add_reader, await, remove_reader)"),
    Recipe("aio/buffered-write", BufferedWriteLoop, "protocol", BufferedWriteTransport.__doc__.split("\n")[0]),
    Recipe("aio/task-per-connection", TaskPerConnectionLoop, "protocol",
           TaskPerConnectionLoop.__doc__.split("\n")[0]),
    Recipe("aio/getpeername", PeernameSyscallLoop, "protocol", PeernameSyscallLoop.__doc__.split("\n")[0]),
    Recipe("aio/nagle", NagleLoop, "protocol", NagleTransport.__doc__.split("\n")[0]),
    Recipe("aio/lean-select", LeanSelectLoop, "protocol", "selectors' epoll select() without its bookkeeping"),
    Recipe("aio-streams/checked-call-soon", CheckedCallSoonLoop, "streams",
           CheckedCallSoonLoop.__doc__.split("\n")[0]),
    Recipe("aio-streams/super-init", SuperInitLoop, "streams", SuperInitHandle.__doc__.split("\n")[0]),
    Recipe("aio-streams/tuple-handle", TupleHandleLoop, "streams", TupleHandle.__doc__.split("\n")[0]),
)}


async def _until_sigterm(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` until SIGTERM, which the loop turns into a cancellation of this task.

    Discussion: the stages stop on a KeyboardInterrupt raised by the signal
    (tinyloop.serving.stop_on_sigterm), which may land inside any callback;
    one that lands in a transport's connection_lost leaves the Server
    waiting for a client that never detaches, and the process never exits.
    A server whose profile must be written on the way out stops the asyncio
    way instead: loop.add_signal_handler, a callback like any other.
    """
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    try:
        await main
    except asyncio.CancelledError:
        pass


def serve(name: str, port: int, profile_to: str | None = None) -> int:
    """Serve HTTP with recipe ``name`` until SIGTERM or Ctrl-C; with ``profile_to``, under
    cProfile counting CPU time (``time.process_time``: a wait in epoll costs nothing)."""
    recipe = RECIPES[name]
    return serve_until_sigterm(name, recipe.loop, lambda sock: (_serve_sock(sock) if recipe.api == "sock"
                                                                 else serve_on(sock, recipe.api)),
                               port, profile_to)


def serve_until_sigterm(name: str, loop: Callable[[], asyncio.AbstractEventLoop],
                        main: Callable[[socket.socket], Coroutine[Any, Any, None]], port: int,
                        profile_to: str | None = None) -> int:
    """Run ``main(listener)`` on a loop from ``loop`` until SIGTERM or Ctrl-C; see :func:`serve`.

    ``listener`` listens on 127.0.0.1:``port`` (0: any free port), announced
    under ``name`` (tinyloop.serving.announce).  benchmarks/uv_changes.py
    serves its loops, and its echo server, through this too.
    """
    sock = listen("127.0.0.1", port)
    announce(name, sock)
    coroutine = _until_sigterm(main(sock))
    profile = cProfile.Profile(time.process_time) if profile_to else None
    if profile is not None:
        profile.enable()
    try:
        with asyncio.Runner(loop_factory=loop) as runner:
            runner.run(coroutine)
    except KeyboardInterrupt:
        pass
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(profile_to)
        sock.close()
    return 0


def server(name: str) -> servers.Server:
    """The harness's Server for ``name``: ``stage:NAME`` is ``python -m tinyloop serve NAME``."""
    if name.startswith("stage:"):
        stage = stages.get(name.partition(":")[2])
        return servers.Server(name, "stage", stage.summary, servers.stage_server(stage).argv,
                              chapter=stage.chapter)
    argv = (sys.executable, str(Path(__file__).resolve()), "--serve", name, "--port", "0")
    return servers.Server(name, "variant", RECIPES[name].summary, argv)


# -- The changes -----------------------------------------------------------------------------

LOADS: dict[str, Load] = {load.name: load for load in (
    Load("ab-k-c10", "ab", 10, True, "ab -k -c 10", "10 keep-alive connections, one request in flight on each"),
    Load("ab-c10", "ab", 10, False, "ab -c 10", "a new connection per request, 10 at a time"),
    Load("ab-k-c1", "ab", 1, True, "ab -k -c 1", "one keep-alive connection, one request at a time: latency"),
)}


@dataclass(frozen=True)
class Change:
    """One row: ``real`` does ``change``, ``undone`` does ``variant`` instead, under ``load``.

    ``figure`` is the run record's key the row compares (CPU µs per request,
    or p50 latency in ms).
    """

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


# -- Per operation, in this process ------------------------------------------------------------

def _noop(arg: object) -> None:
    pass


def _time_call_soon(loop_class: type, ops: int, batch: int = 100) -> float:
    """Seconds of CPU per ``call_soon(f, arg, context=ctx)`` plus its run, ``batch`` per run_once.

    The shape of a Future's done callback (asyncio's futures.py:
    ``call_soon(callback, self, context=ctx)``), on a loop that is not
    running (run_once is called directly, as the tests do).
    """
    loop = loop_class()
    try:
        context = contextvars.copy_context()
        call_soon, run_once, rounds = loop.call_soon, loop.run_once, max(1, ops // batch)
        for _ in range(batch):  # warm: the first batch
            call_soon(_noop, None, context=context)
        run_once()
        start = time.process_time()
        for _ in range(rounds):
            for _ in range(batch):
                call_soon(_noop, None, context=context)
            run_once()
        return (time.process_time() - start) / (rounds * batch)
    finally:
        loop.close()


def _time_iteration(loop_class: type, ops: int, ready: int = 10) -> float:
    """Seconds of CPU per run_once with ``ready`` readable sockets and a no-op reader on each.

    Level-triggered: a byte left unread keeps every socket ready, so each
    iteration selects ``ready`` events and runs ``ready`` callbacks.
    """
    loop = loop_class()
    pairs = [socket.socketpair() for _ in range(ready)]
    try:
        for a, b in pairs:
            a.setblocking(False)
            b.send(b"x")
            loop._add_reader(a.fileno(), _noop, None)
        rounds = max(1, ops // ready)
        loop.run_once()
        start = time.process_time()
        for _ in range(rounds):
            loop.run_once()
        return (time.process_time() - start) / rounds
    finally:
        for a, b in pairs:
            loop._remove_reader(a.fileno())
            a.close()
            b.close()
        loop.close()


def _time_select(selector_class: type, ops: int, ready: int = 10) -> float:
    """Seconds of CPU per select(0) on a ``selector_class`` with ``ready`` ready sockets."""
    selector = selector_class()
    pairs = [socket.socketpair() for _ in range(ready)]
    try:
        for a, b in pairs:
            b.send(b"x")
            selector.register(a, selectors.EVENT_READ)
        select, rounds = selector.select, max(1, ops // ready)
        start = time.process_time()
        for _ in range(rounds):
            select(0)
        return (time.process_time() - start) / rounds
    finally:
        selector.close()
        for a, b in pairs:
            a.close()
            b.close()


@dataclass(frozen=True)
class MicroChange:
    """A per-operation row: ``time(real, ops)`` and ``time(undone, ops)`` return seconds per ``op``."""

    key: str
    change: str
    variant: str
    op: str
    time: Callable[[Any, int], float]
    real: Any
    undone: Any


# Discussion: the collector runs when the tracked objects allocated minus
# those freed pass gc.get_threshold()[0] (700).  Handles that are freed by the
# time the next batch is made never get there: with 100 callbacks per
# iteration no collection runs at all, with either handle.  With 1000 (a
# burst of ready callbacks, or any program that keeps what it allocates) the
# collector runs about once per iteration with one object per handle, twice
# with three (handle, tuple, bound method).  So the handle rows are timed at
# both sizes, and the JSON counts the collections.
_BATCH_1000 = functools.partial(_time_call_soon, batch=1000)

MICRO: tuple[MicroChange, ...] = (
    MicroChange("debug-checks", "call_soon checks the callback in debug mode only", "checks it on every call",
                "call_soon + run, 100 a batch", _time_call_soon, Loop, CheckedCallSoonLoop),
    MicroChange("init-fields", "Handle.__init__ sets Part II's fields itself", "through super().__init__()",
                "call_soon + run, 100 a batch", _time_call_soon, Loop, SuperInitLoop),
    MicroChange("no-tuple", "separate fields, _run calls context.run(callback, *args)",
                "callback = context.run, args = (callback, *args)", "call_soon + run, 100 a batch",
                _time_call_soon, Loop, TupleHandleLoop),
    MicroChange("no-tuple/1000", "separate fields, _run calls context.run(callback, *args)",
                "callback = context.run, args = (callback, *args)", "call_soon + run, 1000 a batch",
                _BATCH_1000, Loop, TupleHandleLoop),
    MicroChange("first-handle", "the Handle as it is now", "the Handle as first written: tuple and super()",
                "call_soon + run, 100 a batch", _time_call_soon, Loop, FirstDesignLoop),
    MicroChange("first-handle/1000", "the Handle as it is now", "the Handle as first written: tuple and super()",
                "call_soon + run, 1000 a batch", _BATCH_1000, Loop, FirstDesignLoop),
    MicroChange("selectors", "selectors' EpollSelector.select()", "without its bookkeeping",
                "run_once, 10 ready sockets", _time_iteration, Loop, LeanSelectLoop),
    MicroChange("selectors-alone", "selectors' EpollSelector.select()", "without its bookkeeping",
                "select(0), 10 ready sockets", _time_select, selectors.EpollSelector, LeanEpollSelector),
)


def measure_micro(chosen: list[MicroChange], repeat: int, ops: int, cpu: int | None) -> list[dict]:
    """Every row's real and undone timing, gc on and off, interleaved; medians in ns per op."""
    previous = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpu is not None and previous is not None:
        os.sched_setaffinity(0, {cpu})
    samples: dict[tuple[str, str, bool], list[float]] = collections.defaultdict(list)
    collections_run: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    started = [0]

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] += 1

    gc.callbacks.append(count)
    try:
        for rep in range(repeat):
            for row in chosen:
                for side in ("real", "undone"):
                    for collect in (True, False):
                        gc.collect()
                        if not collect:
                            gc.disable()
                        started[0] = 0
                        try:
                            which = row.real if side == "real" else row.undone
                            samples[row.key, side, collect].append(row.time(which, ops) * 1e9)
                        finally:
                            gc.enable()
                        if collect:
                            collections_run[row.key, side].append(started[0] * 10_000 / ops)
            print(f"  per operation: repetition {rep + 1}/{repeat} done", file=sys.stderr, flush=True)
    finally:
        gc.callbacks.remove(count)
        if cpu is not None and previous is not None:
            os.sched_setaffinity(0, previous)
    rows = []
    for row in chosen:
        out = {"key": row.key, "change": row.change, "variant": row.variant, "op": row.op, "unit": "ns"}
        for side, label in (("real", "with"), ("undone", "without")):
            on, off = samples[row.key, side, True], samples[row.key, side, False]
            out[label] = {"median": statistics.median(on), "min": min(on), "max": max(on),
                         "median_gc_off": statistics.median(off), "samples": on, "samples_gc_off": off,
                         "collections_per_10k_ops": statistics.median(collections_run[row.key, side])}
        out["ratio"] = out["without"]["median"] / out["with"]["median"]
        out["saved"] = out["without"]["median"] - out["with"]["median"]
        out["saved_gc_off"] = out["without"]["median_gc_off"] - out["with"]["median_gc_off"]
        out["overlap"] = _overlap(out["with"], out["without"])
        rows.append(out)
    return rows


# -- The server runs ---------------------------------------------------------------------------

def _overlap(a: dict, b: dict) -> bool | None:
    """Whether the min-max ranges of two summaries overlap (the difference is then within the noise)."""
    if a.get("min") is None or b.get("min") is None:
        return None
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def summarize(chosen: list[Change], records: list[dict]) -> list[dict]:
    """One row per change: median, min and max of its figure for the real and the undone server."""
    rows = []
    for change in chosen:
        row: dict = {**asdict(change), "unit": "µs" if change.figure == "cpu_us_per_req" else "ms"}
        for side, name in (("with", change.real), ("without", change.undone)):
            runs = [r for r in records if r["server"] == name and r["load"] == change.load]
            ok = [r for r in runs if r["status"] == "ok" and r[change.figure] is not None]
            summary = median_range([r[change.figure] for r in ok]) or {}
            summary.update(runs=len(runs), ok_runs=len(ok),
                           rps=statistics.median([r["rps"] for r in ok]) if ok else None,
                           notes=sorted({r["note"] for r in runs if r["note"]}))
            row[side] = summary
        real, undone = row["with"].get("median"), row["without"].get("median")
        row["ratio"] = undone / real if real and undone is not None else None
        row["saved"] = undone - real if real is not None and undone is not None else None
        row["overlap"] = _overlap(row["with"], row["without"])
        rows.append(row)
    return rows


def run_servers(chosen: list[Change], settings: Settings, repeat: int, warmup: int,
                pinning: dict) -> list[dict]:
    """Every (load, server) the changes need, ``repeat`` times, interleaved; the run records."""
    pairs: list[tuple[str, str]] = []
    for change in chosen:
        for name in (change.real, change.undone):
            if (change.load, name) not in pairs:
                pairs.append((change.load, name))
    records = []
    total = repeat * len(pairs)
    with tempfile.TemporaryDirectory(prefix="tinyloop-aio-changes-") as workdir:
        for rep in range(1, repeat + 1):
            for load_name, name in pairs:
                record = {"rep": rep, **http_run.measure(server(name), LOADS[load_name], settings, pinning,
                                                        Path(workdir), warmup)}
                records.append(record)
                figure = (f"{record['cpu_us_per_req']:.1f} µs/req" if record["cpu_us_per_req"] else "?")
                print(f"[{len(records):>3}/{total}] rep {rep} {load_name:<9} {name:<32} {record['status']:<7} "
                      f"{figure}  {record['rps'] or 0:.0f} req/s  p50 {record['p50_ms'] or 0:.3f} ms"
                      + (f"  ({record['note']})" if record["note"] else ""), file=sys.stderr, flush=True)
    return records


# -- Rendering ----------------------------------------------------------------------------------

def _cell(summary: dict, digits: int) -> str:
    if summary.get("median") is None:
        return "failed"
    return (f"{summary['median']:.{digits}f} ({summary['min']:.{digits}f}-{summary['max']:.{digits}f})")


def _table(header: list[str], rows: list[list[str]], left: int = 2) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i < left else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(line, widths))).rstrip() for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def render(data: dict) -> str:
    """The JSON's two tables and their legend, as text (the chapter includes it whole)."""
    settings = data["settings"]
    out = [f"Per request: the server's CPU time / requests answered, median of {settings['repeat']} "
           f"interleaved runs (min-max); server on one CPU, ab on the other.", ""]
    rows = []
    for row in data["rows"]:
        digits = 1 if row["unit"] == "µs" else 3
        figure = "CPU µs/req" if row["unit"] == "µs" else "p50 ms"
        rps = "/".join(f"{row[side]['rps']:.0f}" if row[side].get("rps") else "-" for side in ("with", "without"))
        rows.append([row["key"], LOADS[row["load"]].title, figure, _cell(row["with"], digits),
                     _cell(row["without"], digits),
                     (f"{row['ratio']:.2f}" + ("*" if row["overlap"] else " ")) if row["ratio"] is not None else "-",
                     f"{row['saved']:+.{digits}f}" if row["saved"] is not None else "-", rps])
    out += _table(["change", "load", "figure", "with the change", "variant", "ratio", "variant costs",
                   "req/s with/variant"], rows, left=3)
    if data.get("micro"):
        out += ["", f"Per operation, in one process on one CPU: ns of CPU time, median of "
                    f"{settings['micro_repeat']} (min-max), garbage collector on; \"gc off\": what the variant",
                    "costs with it disabled; collections: how often the collector ran, with the change/variant.", ""]
        rows = [[row["key"], row["op"], _cell(row["with"], 0), _cell(row["without"], 0),
                 f"{row['ratio']:.2f}" + ("*" if row["overlap"] else " "),
                 f"{row['saved']:+.0f}", f"{row['saved_gc_off']:+.0f}",
                 f"{row['with']['collections_per_10k_ops']:.0f}/{row['without']['collections_per_10k_ops']:.0f}"]
                for row in data["micro"]]
        out += _table(["change", "operation", "with the change", "variant", "ratio", "variant costs",
                       "gc off", "collections/10k ops"], rows)
    out += ["", "* the two min-max ranges overlap: the difference is within the run-to-run spread.",
            "", "The changes (what tinyloop.aio does / the variant that undoes it, a subclass in "
                "benchmarks/aio_changes.py):"]
    seen = set()
    for row in [*data["rows"], *data.get("micro", [])]:
        if row["key"] in seen:
            continue
        seen.add(row["key"])
        servers_named = f" [{row['real']} / {row['undone']}]" if "load" in row else ""
        out += [f"  {row['key']}: {row['change']}",
                f"  {' ' * len(row['key'])}  variant: {row['variant']}{servers_named}"]
    out += ["", f"{data['command']}", f"{data['machine_line']}; load average {data['load_average'][0]:.2f} "
                f"at the start, {data['load_average'][1]:.2f} at the end."]
    return "\n".join(out) + "\n"


# -- The profile ---------------------------------------------------------------------------------

# Layers by source file.  A built-in function that enters the kernel (fairness.py's
# list of system calls, and socket.py's wrappers around them) is a kernel call;
# any other built-in (list.append, a regex match) is counted in its callers'
# layers, split as cProfile's per-caller times split it.
_LAYERS = (
    ("/socket.py", "kernel calls: socket methods, epoll"),
    ("tinyloop/http/", "HTTP: tinyloop/http"),
    ("tinyloop/aio/server.py", "the server: HTTPProtocol, handle_stream"),
    ("tinyloop/callbacks/", "the loop: tinyloop/callbacks + tinyloop/aio"),
    ("tinyloop/aio/", "the loop: tinyloop/callbacks + tinyloop/aio"),
    ("asyncio/streams.py", "asyncio's streams: asyncio/streams.py"),
    ("asyncio/base_events.py", "stdlib asyncio's loop"),
    ("asyncio/selector_events.py", "stdlib asyncio's loop"),
    ("asyncio/events.py", "stdlib asyncio's loop"),
    ("asyncio/", "asyncio's tasks and futures (Python parts)"),
    ("/selectors.py", "selectors module"),
)
_KERNEL = (*SYSCALLS, "'sendmsg'", "'getpeername'", "'getsockname'", "'accept'", "'fileno'")


def layer(function: tuple[str, int, str]) -> str | None:
    """The layer of ``function`` (a pstats key); None for a built-in counted with its callers."""
    path, _, name = function
    for fragment, layer in _LAYERS:
        if fragment in path:
            return layer
    if path == "~":
        if any(s in name for s in _KERNEL):
            return "kernel calls: socket methods, epoll"
        if "_asyncio." in name:
            return "asyncio's tasks and futures (C)"
        return None
    return "other Python"


def by_layer(stats: pstats.Stats,
             layer_of: Callable[[tuple[str, int, str]], str | None] = layer) -> collections.Counter[str]:
    """Seconds of own time per layer: ``layer_of`` (default: by _LAYERS, see layer)."""
    layers: collections.Counter[str] = collections.Counter()
    for function, (_, _, tottime, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        layer = layer_of(function)
        if layer is not None:
            layers[layer] += tottime
            continue
        split = 0.0
        for caller, (_, _, caller_tottime, _) in callers.items():
            layers[layer_of(caller) or "other built-ins"] += caller_tottime
            split += caller_tottime
        if tottime > split:  # called from outside the profile's window
            layers["other built-ins"] += tottime - split
    return layers


# What the profile counts per request: (label, fragments of pstats' function names).
_COUNTED = (
    ("call_soon", ("call_soon)",)),
    ("loop iterations", ("(run_once)", "(_run_once)")),
    ("epoll_ctl", ("'register' of 'select.epoll", "'modify' of 'select.epoll", "'unregister' of 'select.epoll")),
    ("recv", ("'recv' of '_socket",)),
    ("send", ("'send' of '_socket", "'sendmsg' of '_socket")),
)


def count_calls(stats: pstats.Stats, fragments: tuple[str, ...]) -> int:
    """How many calls the profile saw to functions whose pstats name contains one of ``fragments``."""
    return sum(ncalls for function, (_, ncalls, _, _, _) in stats.stats.items()  # type: ignore[attr-defined]
               if any(f in pstats.func_std_string(function) for f in fragments))


def profile_server(name: str, requests: int, pinning: dict, warmup: int = DEFAULTS["warmup"]) -> str:
    """Profile recipe ``name`` under ``ab -k -n REQUESTS -c 10``, after ``warmup`` GET / on one
    keep-alive connection (profiled too, but not counted per request); the summary by layer, as text.

    Discussion: without the warm-up, tinyloop.aio's recv(2) came out four
    times dearer than stdlib asyncio's in the profile, and not in the
    table's runs, which warm up.  The cost of a recv depends on the
    process's history, not only on the loop (the likeliest reason: glibc's
    malloc serves a 256 KiB buffer by mmap(2) until a large block has been
    freed once, e.g. at a connection's EOF); warming up as the table does
    measures the steady state both share.
    """
    def ab(process: ServerProcess) -> int:
        argv = [*pinning["load_prefix"], "ab", "-q", "-k", "-n", str(requests), "-c", "10",
                f"http://127.0.0.1:{process.port}/"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"ab failed: {done.stderr.strip()}")
        return requests

    stats, served = profiled(name, server(name).argv, pinning, warmup, ab)
    return profile_summary(stats, served, f"{name} ({RECIPES[name].summary}): {warmup} GET / to warm up, "
                                          f"then ab -k -n {requests} -c 10")


def profiled(name: str, argv: tuple[str, ...], pinning: dict, warmup: int,
             load: Callable[[ServerProcess], int]) -> tuple[pstats.Stats, int]:
    """Run the server ``argv`` (which takes ``--profile-to FILE``) under cProfile: ``warmup``
    GET / on one keep-alive connection, then ``load(process)``, which returns the requests
    it had answered.  Returns the stats and the requests served, the warm-up's included.

    Raises RuntimeError when the warm-up fails (and what ``load`` raises).
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "server.prof")
        command = [*pinning["server_prefix"], *argv, "--profile-to", out]
        process = ServerProcess(name, command=command).start()
        try:
            failure = warm_up(process.address, warmup, 5.0)  # as the table's runs are
            if failure is not None:
                raise RuntimeError(f"{name}: {failure[1]}")
            requests = load(process)
        finally:
            process.stop()
        stats = pstats.Stats(out)
    return stats, requests + warmup  # the warm-up's requests are in the profile too


def profile_summary(stats: pstats.Stats, served: int, headline: str,
                    counted: tuple[tuple[str, tuple[str, ...]], ...] = _COUNTED,
                    layer_of: Callable[[tuple[str, int, str]], str | None] = layer) -> str:
    """The profile's text: ``headline`` (what ran, under which load), the time by layer
    (``layer_of``, as by_layer) per request of the ``served``, the ``counted`` calls per
    request, and the top ten."""
    layers = by_layer(stats, layer_of)
    total = sum(layers.values())
    lines = [f"{headline}, cProfile on the server; {total * 1e3:.0f} ms of CPU time, "
             f"{total / served * 1e6:.0f} us per request",
             "(built-ins are counted in their callers' layers, except the calls into the kernel)", ""]
    lines += [f"  {layer:<46} {seconds * 1e3:7.1f} ms  {seconds / served * 1e6:5.1f} us/req  "
              f"{100 * seconds / total:5.1f} %" for layer, seconds in layers.most_common() if seconds >= 5e-5]
    lines += ["", "  calls per request: " + ", ".join(
        f"{label} {count_calls(stats, names) / served:.2f}" for label, names in counted)]
    lines += ["", "  the functions with the most time of their own:"]
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:10]  # type: ignore[attr-defined]
    for function, (_, ncalls, tottime, _, _) in top:
        label = pstats.func_std_string(function).replace(str(ROOT) + "/", "")
        label = label[label.find("asyncio/"):] if "/asyncio/" in label else label
        label = label[label.find("selectors.py"):] if "/selectors.py" in label else label
        lines.append(f"  {ncalls:>7} calls  {tottime * 1e3:6.1f} ms  {label}")
    return "\n".join(lines) + "\n"


# -- The command line -----------------------------------------------------------------------------

def _keys(argument: str | None, known: list[str]) -> list[str]:
    if not argument or argument == "all":
        return known
    chosen = [k.strip() for k in argument.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in known]
    if unknown:
        raise SystemExit(f"aio_changes.py: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/aio_changes.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    keys = list(dict.fromkeys([c.key for c in CHANGES] + [m.key for m in MICRO]))
    parser.add_argument("--changes", help=f"comma list (default all: {', '.join(keys)})")
    parser.add_argument("--repeat", type=int, default=DEFAULTS["repeat"],
                        help=f"server runs per row, interleaved (default {DEFAULTS['repeat']})")
    parser.add_argument("--requests", type=int,
                        help="ab's -n for every load (default " + ", ".join(
                            f"{k}={v}" for k, v in DEFAULTS["requests"].items()) + ")")
    parser.add_argument("--warmup", type=int, default=DEFAULTS["warmup"],
                        help=f"keep-alive GET / before each load, unmeasured (default {DEFAULTS['warmup']})")
    parser.add_argument("--timeout", type=float, default=5.0, help="ab's -s, seconds (default 5)")
    parser.add_argument("--micro-repeat", type=int, default=DEFAULTS["micro_repeat"],
                        help=f"per-operation timings per figure (default {DEFAULTS['micro_repeat']})")
    parser.add_argument("--micro-ops", type=int, default=DEFAULTS["micro_ops"],
                        help=f"operations per per-operation timing (default {DEFAULTS['micro_ops']})")
    parser.add_argument("--no-micro", action="store_true", help="skip the per-operation timings")
    parser.add_argument("--no-servers", action="store_true", help="skip the server runs (per-operation only)")
    parser.add_argument("--reference", action="store_true",
                        help="maintainers: write the book's committed results (benchmarks/results/) "
                             "instead of benchmarks/results/local/")
    parser.add_argument("--out", type=Path, help="the JSON (default benchmarks/results/local/aio_changes.json); "
                                                  "the text table goes beside it, .txt")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and ab to CPUs")
    parser.add_argument("--profile", nargs="?", const="aio,aio-streams,aio-sock,asyncio-protocol", metavar="SERVERS",
                        help="instead: profile these servers under ab -k -c 10, by layer "
                             "(default aio,aio-streams,aio-sock,asyncio-protocol)")
    parser.add_argument("--profile-out", type=Path,
                        help="the profile's text (default benchmarks/results/local/profile_aio.txt)")
    parser.add_argument("--serve", choices=sorted(RECIPES), help="instead: run one server (as the runs do)")
    parser.add_argument("--port", type=int, default=8000, help="--serve's port (default 8000; 0: any free)")
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)  # --serve under cProfile, stats written here
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve:
        return serve(args.serve, args.port, args.profile_to)
    pinning = choose_pinning(args.no_pin)
    if args.profile:
        names = _keys(args.profile, list(RECIPES))
        text = "\n".join(profile_server(name, args.requests or DEFAULTS["requests"]["ab-k-c10"], pinning,
                                        args.warmup) for name in names)
        text += (f"\n{display(['python', 'benchmarks/aio_changes.py', *(argv or sys.argv[1:])])}\n"
                 f"load average {os.getloadavg()[0]:.2f} at the end\n")
        out = args.profile_out or (PROFILE_REFERENCE if args.reference else PROFILE_LOCAL)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(text, end="")
        return 0
    keys = _keys(args.changes, list(dict.fromkeys([c.key for c in CHANGES] + [m.key for m in MICRO])))
    chosen = [] if args.no_servers else [c for c in CHANGES if c.key in keys]
    micro = [] if args.no_micro else [m for m in MICRO if m.key in keys]
    requests = {name: args.requests or n for name, n in DEFAULTS["requests"].items()}
    settings = Settings(requests=requests, duration=1.0, socket_timeout=args.timeout, run_timeout=120.0)
    load_start = os.getloadavg()
    date, started = datetime.now(timezone.utc), time.monotonic()
    records = run_servers(chosen, settings, args.repeat, args.warmup, pinning) if chosen else []
    server_cpu = int(pinning["server_cpus"]) if pinning.get("enabled") else None
    micro_rows = measure_micro(micro, args.micro_repeat, args.micro_ops, server_cpu) if micro else []
    machine = fingerprint()
    data = {
        "schema": SCHEMA,
        "date": date.isoformat(timespec="seconds"),
        "command": display(["python", "benchmarks/aio_changes.py",
                                     *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine,
        "machine_line": f"{machine['cpu_model']}, {machine['cpus']} CPUs, {machine['python']}, "
                        f"Linux {machine['kernel']}",
        "ab": servers.tool_versions().get("ab"),
        "pinning": {k: v for k, v in pinning.items() if not k.endswith("_prefix")},
        "load_average": [load_start[0], os.getloadavg()[0]],  # 1-minute: at the start, at the end
        "settings": {"repeat": args.repeat, "requests": requests, "warmup_requests": args.warmup,
                     "socket_timeout_s": args.timeout, "micro_repeat": args.micro_repeat,
                     "micro_ops": args.micro_ops, "gc": "on (and off, for the gc off column)",
                     "cpu_source": "the server process's CPU-time clock (benchmarks/run.py)"},
        "loads": {name: {"title": load.title, "concurrency": load.concurrency, "keepalive": load.keepalive,
                         "measures": load.measures} for name, load in LOADS.items()},
        "servers": {name: {"summary": server(name).summary, "command": display(server(name).argv)}
                    for name in dict.fromkeys(n for c in chosen for n in (c.real, c.undone))},
        "rows": summarize(chosen, records),
        "micro": micro_rows,
        "runs": records,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    write_results(data, args.out or (REFERENCE if args.reference else LOCAL), render(data), ".txt")
    print(conclusion(data))
    return 0


def write_results(data: dict, out: Path, text: str, suffix: str) -> None:
    """Write ``data`` as JSON to ``out``, and ``text`` (the table rendered from it) beside it
    with ``suffix`` (``".txt"``, ``".md"``); print the text, and on stderr where both went."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    out.with_suffix(suffix).write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"wrote {out} and {out.with_suffix(suffix).name}", file=sys.stderr)


def conclusion(data: dict) -> str:
    """The run in one line: how many of the design choices cost less than their undoing, beyond the noise."""
    rows = [row for row in data["rows"] if (row.get("with") or {}).get("median") is not None
            and (row.get("without") or {}).get("median") is not None]
    if not rows:
        return "aio_changes: nothing measured"
    # Lower is better for every figure here (µs per request, ns per operation).
    better = [row for row in rows if row["with"]["median"] < row["without"]["median"]
              and row["with"]["max"] < row["without"]["min"]]
    return (f"{len(better)} of {len(rows)} design choices cost less than their undoing beyond the noise "
            f"(min-max apart): {', '.join(row['key'] for row in better) or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
