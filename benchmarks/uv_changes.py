# benchmarks/uv_changes.py
"""Which move from Part III to Part IV bought how much: tinyloop.aio to tinyloop.uv, one step at a time.

    python -m benchmarks.uv_changes                  every step, every load, 5 interleaved repetitions (about 4 minutes)
    python -m benchmarks.uv_changes --quick          a smoke run: short loads, 1 repetition (under a minute)
    python -m benchmarks.uv_changes --reference      the full run, written where the book reads it
    python -m benchmarks.uv_changes --loads echo-1k --steps aio,uv --repeat 3
    python -m benchmarks.uv_changes --profile        where a request's time goes once the loop is in C
    python -m benchmarks.uv_changes --syscalls       system calls per request of each step, under strace
    python -m benchmarks.uv_changes --syscalls --loads echo-10k   ... per echoed message of 10 KiB
    python -m benchmarks.uv_changes --serve uv/no-batching --app echo --port 8000   one server, by hand

A *step* is a loop.  Each step adds one move to the step before it, so the
steps are cumulative: Part III's loop (``aio``, the baseline); the run loop,
handles, timers and readiness in C on libuv, with Part III's socket
transports on ``uv_poll`` (``uv/poll-transports``); transports on
``uv_tcp``, writing at once (``uv/no-batching``); and the writes of a turn
batched into one ``writev`` (``uv``, tinyloop.uv.Loop itself).  The two
steps between are built here: ``uv/poll-transports`` is a subclass of
tinyloop.uv.Loop overriding one method, and ``uv/no-batching`` runs
tinyloop.uv.Loop on benchmarks/uv_variants.py's ``no-batching`` build of
the extension (one patched line: every write() flushed at once), because
the product carries no switch for it.

Every step serves the same two programs: the HTTP Protocol server of
Part III (tinyloop.aio.server.serve_on) and the echo Protocol of
benchmarks/peers/echo_server.py.  The loads: ``wrk -t1 -c 100`` keep-alive
on ``/``, the same with 24 requests pipelined per write (Japronto's load;
the HTTP protocol answers them with one write, so batching has nothing to
combine there either: see --syscalls), and TCP echo of 1 KiB messages on 10 connections (the C client of
benchmarks/echo.py).  The figure is the server's own CPU time per request
or message (benchmarks/README.md, "How to read CPU µs/request"); beside it
the requests or messages per second, and each step's speed-up over the step
before it and over ``aio``.  The loop's own operations (call_soon,
call_later + cancel, a sleep(0) round trip; benchmarks/micro.py's timings)
are timed on aio and uv in this process.

Writes benchmarks/results/local/uv_changes.json and .md (ignored by git);
``--reference`` writes benchmarks/results/uv_changes.json and .md, which the
libuv chapter includes.  ``--profile`` writes profile_uv.txt the same way,
and ``--syscalls`` uv_changes_syscalls.txt (benchmarks/syscalls.py's count:
``strace -c -f`` on the server over one wrk load, per answered request).
"""

# Rules this file keeps:
#   * Nothing is copied from the other harnesses: an HTTP run is
#     benchmarks/run.py's ``measure`` (fresh server, warm-up, wrk, the
#     server's CPU clock), an echo run is benchmarks/echo.py's, a server is
#     served and profiled by benchmarks/aio_changes.py's functions, and the
#     per-operation timings are benchmarks/micro.py's.  What is here is the
#     steps, the order of the runs, and the table.
#   * A step is tinyloop.aio.Loop, tinyloop.uv.Loop, a subclass of the
#     latter that overrides one method, or tinyloop.uv.Loop on a variant
#     build of the extension (benchmarks/uv_variants.py, its server in its
#     own process); nothing in tinyloop/ is patched.
#   * Repetitions are interleaved (repetition 1 runs every load on every
#     step, then repetition 2...), and every figure is a median with its min
#     and max.  Ratios are of medians.
#   * The JSON holds every run and everything the table shows; the Markdown
#     table is rendered from the JSON and nothing else.

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import aio_changes, echo, loads, micro, servers, syscalls, uv_variants
from benchmarks import run as http_run
from benchmarks.harness import experiment
from benchmarks.harness.machine import display, fingerprint
from benchmarks.harness.output import RESULTS
from benchmarks.harness.process import choose_pinning
from benchmarks.harness.summary import median_range
from benchmarks.peers.echo_server import EchoProtocol
from tinyloop import stages
from tinyloop.aio.server import serve_on
from tinyloop.aio.unix_events import Loop as AioLoop
from tinyloop.aio.unix_events import SelectorEventLoop
from tinyloop.testing import ServerProcess

SCHEMA = 1
REFERENCE = RESULTS / "uv_changes.json"             # the book's; only --reference writes it
LOCAL = RESULTS / "local" / "uv_changes.json"       # a user's run: ignored by git
PROFILE_REFERENCE = RESULTS / "profile_uv.txt"
PROFILE_LOCAL = RESULTS / "local" / "profile_uv.txt"
SYSCALLS_FILE = "uv_changes_syscalls.txt"

# Seconds per wrk run (whole seconds: wrk's -d takes no fraction) and per
# echo run (after its warm-up), repetitions, and the per-operation timings.  The default run (4 steps x 3 loads x 5
# repetitions, about 3 s a run, plus the timings) takes about 4 minutes.
DEFAULTS = {"repeat": 5, "duration": 2, "echo_duration": 1.5, "echo_warmup": 0.5, "warmup": 1000,
            "timeout": 5.0, "micro_repeat": 5, "micro_ops": 100_000, "profile_duration": 3}
QUICK = {"repeat": 1, "duration": 1, "echo_duration": 0.3, "echo_warmup": 0.1, "warmup": 20,
         "timeout": 2.0, "micro_repeat": 1, "micro_ops": 2_000, "profile_duration": 1}

ECHO_LOAD = "echo-1k"
ECHO_SIZE = 1024  # bytes per message
# The echo loads by name, bytes per message.  echo-10k runs only when named
# in --loads: the size where batching holds a turn's messages longest.
ECHO_SIZES = {ECHO_LOAD: ECHO_SIZE, "echo-10k": 10 * 1024}
LOAD_TITLES = {
    "wrk": "wrk -t1 -c 100, keep-alive, GET /",
    "wrk-pipeline": "wrk -t1 -c 100, 24 requests pipelined per write",
    **{name: f"TCP echo, {size // 1024} KiB messages, {echo.CONNECTIONS} connections"
       for name, size in ECHO_SIZES.items()},
}
LOAD_NAMES = ("wrk", "wrk-pipeline", ECHO_LOAD)   # the default run's loads


# -- The steps ----------------------------------------------------------------------------------
#
# Discussion: tinyloop.uv is a C extension, and a checkout without libuv has
# none.  This script must still import there (for --help, and for the tests
# to say why they skip); and a step that runs a variant of the extension
# (benchmarks/uv_variants.py) must choose its build before anything imports
# tinyloop.uv.  So nothing here imports tinyloop.uv until a step's loop is
# asked for, and uv_missing() says why it cannot be.

def uv_missing() -> str | None:
    """Why tinyloop.uv does not import here, or None (imports it: after any uv_variants.use)."""
    return stages.get("uv").unavailable()


@dataclass(frozen=True)
class Step:
    """One row: ``key`` names it, ``move`` is what it adds to the step before; ``loop`` is the
    loop class ("aio", "uv", or "uv-poll-transports": Part III's transports on the C core),
    ``build`` the benchmarks/uv_variants.py build it runs on (None: the installed extension)."""

    key: str
    loop: str
    move: str
    build: str | None = None

    def factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """The step's loop class.  A step with a ``build`` runs in a process that chose that build
        first (``serve``); elsewhere RuntimeError, rather than the installed extension's loop."""
        if self.loop == "aio":
            return AioLoop
        from tinyloop.uv import _loop
        from tinyloop.uv.loop import Loop as UVLoop

        if self.build is not None and f"/build/uv/{self.build}/" not in _loop.__file__:
            raise RuntimeError(f"step {self.key} runs on benchmarks/uv_variants.py's {self.build!r} build, "
                               f"in its own process (uv_changes.py --serve), not on {_loop.__file__}")
        if self.loop == "uv-poll-transports":
            class PollTransportsLoop(UVLoop):
                """tinyloop.uv's C core with Part III's socket transports, on uv_poll readiness."""

                _make_socket_transport = _poll_transport
            return PollTransportsLoop
        return UVLoop


def _poll_transport(self: Any, sock: socket.socket, protocol: asyncio.BaseProtocol, waiter: Any = None, *,
                    extra: Any = None, server: Any = None) -> asyncio.Transport:
    """Undoes "transports on uv_tcp": Part III's Python transport (tinyloop/aio/selector_events.py),
    whose add_reader/add_writer are the C loop's uv_poll handles."""
    return SelectorEventLoop._make_socket_transport(self, sock, protocol, waiter, extra=extra, server=server)


def prepare_builds(keys: list[str]) -> None:
    """Build the variant extensions that steps ``keys`` run on, before any server waits for one."""
    for build in dict.fromkeys(_STEPS[key].build for key in keys if _STEPS[key].build):
        print(f"building tinyloop.uv's {build!r} variant (benchmarks/uv_variants.py) ...", file=sys.stderr, flush=True)
        uv_variants.build(build)


STEPS: tuple[Step, ...] = (
    Step("aio", "aio", "Part III's loop, pure Python (tinyloop.aio.Loop): the baseline"),
    Step("uv/poll-transports", "uv-poll-transports",
         "the run loop, handles, timers and readiness in C on libuv (Part III's transports, on uv_poll)"),
    Step("uv/no-batching", "uv", "transports on uv_tcp, each write() tried at once (uv_try_write)",
         build="no-batching"),
    Step("uv", "uv", "a turn's writes batched into one writev per transport (tinyloop.uv.Loop)"),
)
_STEPS = {step.key: step for step in STEPS}
APPS = ("http", "echo")


# -- The servers ----------------------------------------------------------------------------------

async def serve_echo(listener: socket.socket) -> None:
    """Echo with benchmarks/peers/echo_server.py's Protocol on ``listener`` until cancelled;
    then close the server and drop its clients (abort_clients, where the Server has it)."""
    server = await asyncio.get_running_loop().create_server(EchoProtocol, sock=listener)
    try:
        await asyncio.get_running_loop().create_future()  # never done: wait for the cancellation
    finally:
        server.close()
        abort_clients = getattr(server, "abort_clients", None)
        if abort_clients is not None:
            abort_clients()


def serve(key: str, app: str, port: int, profile_to: str | None = None) -> int:
    """Serve ``app`` (``"http"``: serve_on's HTTPProtocol; ``"echo"``: EchoProtocol) on step
    ``key``'s loop until SIGTERM or Ctrl-C; with ``profile_to``, under cProfile (aio_changes.serve)."""
    main = serve_echo if app == "echo" else (lambda sock: serve_on(sock, "protocol"))
    step = _STEPS[key]
    if step.build is not None:
        uv_variants.use(step.build)
    loop = step.factory()
    return aio_changes.serve_until_sigterm(f"{app}:{key}", loop, main, port, profile_to)


def server(key: str, app: str) -> servers.Server:
    """The harness's Server for step ``key`` serving ``app``: this module with --serve."""
    argv = (sys.executable, "-m", "benchmarks.uv_changes", "--serve", key, "--app", app, "--port", "0")
    return servers.Server(f"{app}:{key}", "variant", _STEPS[key].move, argv)


# -- The runs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What to run: ``steps`` and ``loads`` (names), ``repeat`` interleaved repetitions;
    ``http`` for the wrk loads (benchmarks/loads.Settings), ``echo`` for the echo load,
    ``warmup`` GET / before each wrk load."""

    steps: list[str]
    loads: list[str]
    repeat: int
    http: loads.Settings
    echo: echo.Settings
    warmup: int


def measure(key: str, load: str, plan: Plan, pinning: dict, workdir: Path) -> dict:
    """One run of step ``key`` under ``load``: the harness's record in ``run``, and the
    figures this table compares (``cpu_us``: server CPU µs per request or message;
    ``rate``: requests or messages per second)."""
    if load in ECHO_SIZES:
        record = echo.measure(server(key, "echo"), ECHO_SIZES[load], plan.echo, pinning)
        cpu, rate = record["cpu_us_per_msg"], record["msgs_per_s"]
    else:
        record = http_run.measure(server(key, "http"), loads.get(load), plan.http, pinning, workdir, plan.warmup)
        cpu, rate = record["cpu_us_per_req"], record["rps"]
    ok = record["status"] == "ok" and cpu is not None
    return {"step": key, "load": load, "status": record["status"], "note": record["note"],
            "cpu_us": cpu if ok else None, "rate": rate if ok else None, "run": record}


def run_all(plan: Plan, pinning: dict) -> list[dict]:
    """Every (load, step) ``plan.repeat`` times, interleaved; the run records, each with ``rep``."""
    records: list[dict] = []
    total = plan.repeat * len(plan.loads) * len(plan.steps)
    with tempfile.TemporaryDirectory(prefix="tinyloop-uv-changes-") as workdir:
        for rep in range(1, plan.repeat + 1):
            for load in plan.loads:
                for key in plan.steps:
                    record = {"rep": rep, **measure(key, load, plan, pinning, Path(workdir))}
                    records.append(record)
                    figure = f"{record['cpu_us']:.1f} µs CPU" if record["cpu_us"] else "?"
                    print(f"[{len(records):>3}/{total}] rep {rep} {load:<12} {key:<18} {record['status']:<7} "
                          f"{figure}  {record['rate'] or 0:.0f}/s" + (f"  ({record['note']})" if record["note"]
                                                                      else ""), file=sys.stderr, flush=True)
    return records


def summarize(plan: Plan, records: list[dict]) -> list[dict]:
    """One row per (load, step), in the plan's order: median, min, max of CPU µs and of the
    rate over the runs that succeeded; ``speedup_previous`` is the previous step's median
    CPU over this one's, ``speedup_aio`` aio's over this one's (above 1: this step costs less)."""
    rows = []
    for load in plan.loads:
        first = previous = None
        for key in plan.steps:
            runs = [r for r in records if r["load"] == load and r["step"] == key]
            ok = [r for r in runs if r["cpu_us"] is not None]
            row: dict[str, Any] = {"load": load, "step": key, "runs": len(runs), "ok_runs": len(ok),
                                   "cpu_us": median_range([r["cpu_us"] for r in ok]),
                                   "rate": median_range([r["rate"] for r in ok]),
                                   "notes": sorted({r["note"] for r in runs if r["note"]})}
            median = row["cpu_us"]["median"] if row["cpu_us"] else None
            row["speedup_previous"] = previous / median if previous and median else None
            row["speedup_aio"] = first / median if first and median else None
            if key == "aio":
                first = median
            previous = median
            rows.append(row)
    return rows


# -- Per operation, in this process --------------------------------------------------------------

OPERATIONS = ("call_soon", "timer_cancel", "sleep0")  # benchmarks/micro.py's names


def measure_micro(repeat: int, ops: int, cpu: int | None) -> list[dict]:
    """micro.py's timings of OPERATIONS on aio and uv, ``repeat`` times interleaved, ``ops``
    operations each, on CPU ``cpu`` (None: where the scheduler puts us); ns per operation."""
    loops = {"aio": AioLoop, "uv": _STEPS["uv"].factory()}
    previous = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpu is not None and previous is not None:
        os.sched_setaffinity(0, {cpu})
    samples: dict[tuple[str, str], list[float]] = {}
    try:
        for rep in range(repeat):
            for op in OPERATIONS:
                for name, factory in loops.items():
                    seconds = micro.OPERATIONS[op][0](ops, factory)
                    samples.setdefault((op, name), []).append(seconds / ops * 1e9)
            print(f"  per operation: repetition {rep + 1}/{repeat} done", file=sys.stderr, flush=True)
    finally:
        if cpu is not None and previous is not None:
            os.sched_setaffinity(0, previous)
    rows = []
    for op in OPERATIONS:
        row = {"op": op, "what": micro.OPERATIONS[op][1], "unit": "ns",
               **{name: {**median_range(samples[op, name]), "samples": samples[op, name]}
                  for name in loops}}
        row["speedup"] = row["aio"]["median"] / row["uv"]["median"]
        rows.append(row)
    return rows


# -- Rendering -----------------------------------------------------------------------------------

def _cell(spread: dict | None, digits: int) -> str:
    if not spread:
        return "failed"
    return f"{spread['median']:.{digits}f} ({spread['min']:.{digits}f}–{spread['max']:.{digits}f})"


def _times(ratio: float | None) -> str:
    return f"×{ratio:.2f}" if ratio is not None else "–"


def _markdown(header: list[str], rows: list[list[str]], right_from: int) -> list[str]:
    align = ["---" if i < right_from else "--:" for i in range(len(header))]
    return ["| " + " | ".join(line) + " |" for line in (header, align, *rows)]


def render(data: dict) -> str:
    """The JSON's tables as Markdown (MyST), with their legend: the libuv chapter includes it whole."""
    settings = data["settings"]
    out = []
    if settings.get("quick"):
        out += ["*A `--quick` smoke run: runs too short and too few to compare steps by. The book's figures "
                "come from the full run (`--reference`).*", ""]
    measured = [load for load in data["plan"]["loads"] if any(row["load"] == load for row in data["rows"])]
    if measured:
        out += [f"Server CPU time per request (HTTP) or message (echo), in µs: median of {settings['repeat']} "
                f"interleaved runs (min–max), server on one CPU, load generator on the other. Each step adds "
                f"one move to the step above it; speed-up is the CPU time of the step above (or of `aio`) "
                f"divided by this step's.", ""]
    for load in measured:
        unit = "message" if load in ECHO_SIZES else "request"
        out += [f"**{LOAD_TITLES[load]}**", ""]
        rows = [[f"`{row['step']}`", _STEPS[row["step"]].move, _cell(row["cpu_us"], 1),
                 f"{row['rate']['median']:,.0f}" if row["rate"] else "–",
                 _times(row["speedup_previous"]), _times(row["speedup_aio"])]
                for row in data["rows"] if row["load"] == load]
        out += _markdown(["step", "the move it adds", f"CPU µs per {unit}", f"{unit}s/s",
                          "speed-up over the step above", "over aio"], rows, 2)
        notes = [f"`{row['step']}`: {note}" for row in data["rows"] if row["load"] == load for note in row["notes"]]
        out += [""] + [f"- {note}" for note in notes] + ([""] if notes else [])
    if data.get("micro"):
        out += [f"**The loop's own operations** (benchmarks/micro.py's timings, in this process): ns of "
                f"wall time per operation, median of {settings['micro_repeat']} (min–max), "
                f"{settings['micro_ops']:,} operations each.", ""]
        rows = [[row["what"], _cell(row["aio"], 0), _cell(row["uv"], 0), _times(row["speedup"])]
                for row in data["micro"]]
        out += _markdown(["operation", "aio", "uv", "speed-up"], rows, 1) + [""]
    out += [f"`{data['command']}`, {data['elapsed_s']:.0f} s; {data['machine_line']}; load average "
            f"{data['load_average'][0]:.2f} at the start, {data['load_average'][1]:.2f} at the end."]
    return "\n".join(out) + "\n"


# -- The profile ----------------------------------------------------------------------------------

# Discussion: what cProfile can see of a loop in C.  It records Python
# frames, and calls from Python to built-in functions; a Cython method is
# neither (its function type is Cython's own), so it never gets a line.
# The time tinyloop.uv spends in C between two Python callbacks (uv_run,
# epoll_wait, read and writev, handing each event to its handle) is
# therefore charged to the Python frame under it: Part II's run_forever,
# which calls the C run_once.  On tinyloop.uv that frame's own time *is*
# the C loop, system calls included, and _uv_layer names it so.  (A C
# method a callback calls, transport.write, is charged to that callback,
# with the send it makes.)  On
# tinyloop.aio the same function's own time is a few lines of Python and
# stays in the Python loop's layer.
C_LOOP = "the loop in C: tinyloop.uv, libuv, syscalls"
_RUN_FOREVER = ("tinyloop/callbacks/loop.py", "run_forever")


def _uv_layer(function: tuple[str, int, str]) -> str | None:
    """aio_changes' layers, with the own time of run_forever on a uv loop as the C loop's."""
    path, _, name = function
    if path.endswith(_RUN_FOREVER[0]) and name == _RUN_FOREVER[1]:
        return C_LOOP
    return aio_changes.layer(function)


# What the profile counts per request: Python functions wherever they are
# called from, a built-in only when Python calls it (on uv, recv and send
# are called from C, and count 0).
_COUNTED = (
    ("data_received", ("(data_received)",)),
    ("call_soon", ("call_soon)",)),
    ("recv", ("'recv' of '_socket",)),
    ("send", ("'send' of '_socket", "'sendmsg' of '_socket")),
)


def profile(key: str, duration: float, pinning: dict, warmup: int) -> str:
    """Step ``key``'s HTTP server under cProfile: ``warmup`` GET / on one keep-alive
    connection, then ``wrk -t1 -c 100 -d DURATION``; the summary by layer, as text."""
    load = loads.get("wrk")
    settings = loads.Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)

    def wrk(process: ServerProcess) -> int:
        with tempfile.TemporaryDirectory() as workdir:
            result, _, output = loads.run(load, f"http://127.0.0.1:{process.port}/", settings, Path(workdir),
                                          pinning["load_prefix"])
        if not result.completed or result.failed:
            raise RuntimeError(f"wrk: {result.error or output.strip()[-200:]}")
        return result.completed

    stats, served = aio_changes.profiled(f"http:{key}", server(key, "http").argv, pinning, warmup, wrk)
    on_uv = key.startswith("uv")
    text = aio_changes.profile_summary(stats, served, f"{key} ({_STEPS[key].move}): {warmup} GET / to warm up, "
                                                      f"then wrk -t1 -c 100 -d {duration:g}s", _COUNTED,
                                       _uv_layer if on_uv else aio_changes.layer)
    if on_uv:
        text += ("\n  (cProfile sees no Cython method: the C loop's layer is the own time of run_forever,\n"
                 "  which calls it; a C method that a callback calls, such as transport.write, counts in\n"
                 "  that callback's layer; recv and send are made from C, so cProfile counts none of them)\n")
    return text


# -- System calls per request ---------------------------------------------------------------------

def count_syscalls(keys: list[str], load_names: list[str], duration: float, pinning: dict, warmup: int) -> str:
    """benchmarks/syscalls.py's strace count for each step in ``keys`` under each load in
    ``load_names`` (wrk: per answered request; echo: per echoed message), one fresh server each;
    a text table: reads, writes, waits, requests per wait (what one turn answers), every call."""
    settings = loads.Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
    depths = {name: depth for depth, name in syscalls.DEPTH_LOADS.items()}
    lines = [f"{'step':<20} {'load':<13} {'requests':>8} {'read':>6} {'write':>6} {'wait':>6} "
             f"{'req/wait':>8} {'total':>6}  calls per request or message"]
    with tempfile.TemporaryDirectory(prefix="tinyloop-uv-syscalls-") as workdir:
        for load in (name for name in load_names if name in depths or name in ECHO_SIZES):
            for key in keys:
                # The server's name names strace's output file: no "/" in it.
                app = "echo" if load in ECHO_SIZES else "http"
                named = dataclasses.replace(server(key, app), name=f"{app}-{key.replace('/', '-')}")
                if load in ECHO_SIZES:
                    record = _echo_syscalls(named, ECHO_SIZES[load], duration, pinning, Path(workdir))
                else:
                    record = syscalls.measure(named, depths[load], settings, pinning, Path(workdir), warmup)
                figures = record["per_request"]
                if not figures:
                    lines.append(f"{key:<20} {load:<13} failed: {record['note']}")
                    continue
                calls = ", ".join(f"{name} {count / record['requests']:.3f}"
                                  for name, count in sorted(record["calls"].items(), key=lambda kv: -kv[1])[:6])
                lines.append(f"{key:<20} {load:<13} {record['requests']:>8} {figures['read']:>6.2f} "
                             f"{figures['write']:>6.2f} {figures['wait']:>6.3f} {1 / figures['wait']:>8.1f} "
                             f"{figures['total']:>6.2f}  {calls}")
                print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines) + "\n"


def _echo_syscalls(named: servers.Server, size: int, duration: float, pinning: dict, workdir: Path) -> dict:
    """syscalls.measure's record for the echo load: ``requests`` are the messages the echo
    client counted over ``duration`` seconds, after a second of unmeasured echo."""
    record: dict = {"requests": None, "calls": None, "per_request": None, "note": None}
    settings = echo.Settings(duration=duration, warmup=1.0, timeout=5.0)
    process, failure = servers.start(named, pinning["server_prefix"])
    if process is None:
        return {**record, "note": failure[1]}

    def client(seconds: float) -> dict | None:
        argv = [*pinning["load_prefix"], *echo.client_command(process.port, size, seconds, settings)]
        code, text = experiment.run_tool(argv, seconds + settings.timeout + 10)
        return echo.parse_client(text) if code == 0 else None

    summary = workdir / f"{named.name}-{size}.strace"
    try:
        client(settings.warmup)
        with syscalls.Strace(process.pid, ["-c"], summary):
            result = client(duration)
    except RuntimeError as error:
        return {**record, "note": str(error)}
    finally:
        process.stop()
    calls = syscalls.parse_strace_summary(summary.read_text()) if summary.exists() else {}
    if not result or not result["messages"] or not calls:
        return {**record, "note": "no message echoed, or strace counted no call"}
    messages = int(result["messages"])
    return {**record, "requests": messages, "calls": calls, "per_request": syscalls.per_request(calls, messages)}


# -- The command line -----------------------------------------------------------------------------

def _names(argument: str | None, known: tuple[str, ...], what: str, in_given_order: bool = False) -> list[str]:
    """``"a,b"`` checked against ``known``, in ``known``'s order unless ``in_given_order``; None or "all": known."""
    if not argument or argument == "all":
        return list(known)
    chosen = list(dict.fromkeys(k.strip() for k in argument.split(",") if k.strip()))
    unknown = [k for k in chosen if k not in known]
    if unknown:
        raise SystemExit(f"uv_changes.py: unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return chosen if in_given_order else [k for k in known if k in chosen]


def _loads(argument: str | None) -> list[str]:
    """--loads: the default run's loads when not given (or "all"), else the named ones in LOAD_TITLES' order."""
    return list(LOAD_NAMES) if not argument or argument == "all" else _names(argument, tuple(LOAD_TITLES), "load")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.uv_changes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    keys = tuple(_STEPS)
    parser.add_argument("--steps", help=f"comma list, kept in order (default all: {', '.join(keys)})")
    parser.add_argument("--loads", help=f"comma list (default {','.join(LOAD_NAMES)}; also "
                                        f"{', '.join(name for name in LOAD_TITLES if name not in LOAD_NAMES)})")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    for name, what in (("repeat", "runs per step and load, interleaved"),
                       ("duration", "seconds per wrk run"), ("echo-duration", "seconds per echo run"),
                       ("echo-warmup", "seconds of echo before each measured run, unmeasured"),
                       ("warmup", "keep-alive GET / before each wrk run, unmeasured"),
                       ("timeout", "seconds a load generator waits on a silent server"),
                       ("micro-repeat", "per-operation timings per figure"),
                       ("micro-ops", "operations per per-operation timing"),
                       ("profile-duration", "seconds of wrk under --profile")):
        default = DEFAULTS[name.replace("-", "_")]
        parser.add_argument(f"--{name}", type=type(default), help=f"{what} (default {default})")
    parser.add_argument("--no-micro", action="store_true", help="skip the per-operation timings")
    parser.add_argument("--no-servers", action="store_true", help="skip the server runs (per-operation only)")
    parser.add_argument("--reference", action="store_true",
                        help="maintainers: write the book's committed results (benchmarks/results/) "
                             "instead of benchmarks/results/local/")
    parser.add_argument("--out", type=Path, help="the JSON (default benchmarks/results/local/uv_changes.json); "
                                                  "the Markdown table goes beside it, .md")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and load generator to CPUs")
    parser.add_argument("--profile", nargs="?", const="uv,aio", metavar="STEPS",
                        help="instead: profile these steps' HTTP servers under wrk -t1 -c 100, by layer "
                             "(default uv,aio: after and before, under the same load)")
    parser.add_argument("--profile-out", type=Path,
                        help="the profile's text (default benchmarks/results/local/profile_uv.txt)")
    parser.add_argument("--syscalls", nargs="?", const="uv/no-batching,uv", metavar="STEPS",
                        help="instead: count these steps' system calls per request or echoed message "
                             "under strace, with the loads of --loads (default uv/no-batching,uv)")
    parser.add_argument("--serve", choices=keys, help="instead: run one server (as the runs do)")
    parser.add_argument("--app", choices=APPS, default="http", help="--serve's program (default http)")
    parser.add_argument("--port", type=int, default=8000, help="--serve's port (default 8000; 0: any free)")
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)  # --serve under cProfile, stats written here
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve:   # first: a variant's build must be chosen before tinyloop.uv is imported
        return serve(args.serve, args.app, args.port, args.profile_to)
    missing = uv_missing()
    if missing is not None:
        raise SystemExit(f"uv_changes.py: tinyloop.uv is not available here: {missing}")
    base = QUICK if args.quick else DEFAULTS
    value = {key: getattr(args, key) if getattr(args, key) is not None else default
             for key, default in base.items()}
    command = display(["python", "benchmarks/uv_changes.py", *(sys.argv[1:] if argv is None else argv)])
    pinning = choose_pinning(args.no_pin)
    if args.syscalls:
        keys = _names(args.syscalls, tuple(_STEPS), "step", in_given_order=True)
        prepare_builds(keys)
        text = count_syscalls(keys, _loads(args.loads), value["duration"] + 1,
                              pinning, value["warmup"])
        text += (f"\nServer system calls per answered request (wrk) or echoed message (echo), strace -c -f on "
                 f"the server over one run "
                 f"(benchmarks/syscalls.py); {command}; load average {os.getloadavg()[0]:.2f} at the end\n")
        out = RESULTS / SYSCALLS_FILE if args.reference else RESULTS / "local" / SYSCALLS_FILE
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(text, end="")
        return 0
    if args.profile:
        prepare_builds(_names(args.profile, tuple(_STEPS), "step"))
        text = "\n".join(profile(key, value["profile_duration"], pinning, value["warmup"])
                         for key in _names(args.profile, tuple(_STEPS), "step", in_given_order=True))
        text += f"\n{command}\nload average {os.getloadavg()[0]:.2f} at the end\n"
        out = args.profile_out or (PROFILE_REFERENCE if args.reference else PROFILE_LOCAL)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(text, end="")
        return 0
    plan = Plan(steps=[] if args.no_servers else _names(args.steps, tuple(_STEPS), "step"),
                loads=_loads(args.loads), repeat=value["repeat"],
                http=loads.Settings(requests={}, duration=value["duration"], socket_timeout=value["timeout"],
                                    run_timeout=60.0),
                echo=echo.Settings(duration=value["echo_duration"], warmup=value["echo_warmup"],
                                   timeout=value["timeout"]),
                warmup=value["warmup"])
    prepare_builds(plan.steps)
    if plan.steps and set(ECHO_SIZES) & set(plan.loads):
        failure = echo.prepare_client()
        if failure is not None:
            raise SystemExit(f"uv_changes.py: the echo client cannot be built: {failure}")
    load_start = os.getloadavg()
    date, started = datetime.now(timezone.utc), time.monotonic()
    records = run_all(plan, pinning) if plan.steps else []
    server_cpu = int(pinning["server_cpus"]) if pinning.get("enabled") else None
    micro_rows = [] if args.no_micro else measure_micro(value["micro_repeat"], value["micro_ops"], server_cpu)
    machine = fingerprint()
    versions = servers.tool_versions()
    data = {
        "schema": SCHEMA,
        "date": date.isoformat(timespec="seconds"),
        "command": command,
        "machine": machine,
        "machine_line": f"{machine['cpu_model']}, {machine['cpus']} CPUs, {machine['python']}, "
                        f"Linux {machine['kernel']}",
        "tools": {"wrk": versions.get("wrk"), "cc": versions.get("cc")},
        "pinning": {k: v for k, v in pinning.items() if not k.endswith("_prefix")},
        "load_average": [load_start[0], os.getloadavg()[0]],  # 1-minute: at the start, at the end
        "settings": {**value, "quick": args.quick, "echo_size_bytes": ECHO_SIZE, "echo_sizes_bytes": ECHO_SIZES, "echo_connections": echo.CONNECTIONS,
                     "cpu_source": "the server process's CPU-time clock (benchmarks/run.py)",
                     "micro_clock": "time.perf_counter (benchmarks/micro.py)"},
        "plan": {"steps": plan.steps, "loads": plan.loads},
        "steps": {step.key: {"move": step.move, "loop": step.loop, "build": step.build or "installed"}
                  for step in STEPS if step.key in plan.steps},
        "loads": {name: LOAD_TITLES[name] for name in plan.loads},
        "rows": summarize(plan, records),
        "micro": micro_rows,
        "runs": records,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    aio_changes.write_results(data, args.out or (REFERENCE if args.reference else LOCAL), render(data), ".md")
    print(conclusion(data))
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: server CPU per request under wrk, Part III's loop against each step's."""
    rows = [row for row in data["rows"] if row["load"] == "wrk" and row.get("cpu_us")]
    if not rows:
        return "uv_changes: nothing measured"
    return "wrk, server CPU µs per request by step: " + ", ".join(
        f"{row['step']} {row['cpu_us']['median']:.1f}" for row in rows)


if __name__ == "__main__":
    sys.exit(main())
