# benchmarks/uv_changes.py
"""Which move from Part III to Part IV bought how much: tinyloop.aio to tinyloop.uv, one step at a time.

    python -m benchmarks.uv_changes                  every step, every load, 5 interleaved repetitions
    python -m benchmarks.uv_changes --quick          a smoke run (under a minute)
    python -m benchmarks.uv_changes --reference      the full run, written where the book reads it
    python -m benchmarks.uv_changes --steps uv/no-batching,uv --loads wrk,echo-10k --repeat 7
    python -m benchmarks.uv_changes --profile        where a request's time goes once the loop is in C
    python -m benchmarks.uv_changes --syscalls       system calls per request of each step, under strace
    python -m benchmarks.uv_changes --serve uv/no-batching --app echo --port 8000   one server, by hand

Each step (STEPS) adds one move to the step before it.  Every step serves
Part III's HTTP Protocol under ``wrk`` and ``wrk-pipeline`` (benchmarks/run.py's
``measure``) and benchmarks/peers/echo_server.py's under TCP echo of 1 KiB
messages (benchmarks/echo.py's); the figure is the server's own CPU time per
request or message.  The loop's own operations on aio and uv are
benchmarks/micro.py's.  ``--profile`` writes profile_uv.txt beside the JSON,
``--syscalls`` uv_changes_syscalls.txt (``strace -c -f`` on the server).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import echo, loads, servers, syscalls, uv_variants
from benchmarks import run as http_run
from benchmarks.harness import experiment, output, strace, summary, variants
from benchmarks.harness.machine import display
from benchmarks.harness.process import choose_names
from benchmarks.harness.profiling import layer, profile_summary, profiled, serve_until_sigterm
from benchmarks.harness.render import DASH, footer, markdown, median_cell, number, quick_caption
from benchmarks.peers import echo_server
from tinyloop import stages
from tinyloop.aio.server import serve_on
from tinyloop.aio.unix_events import Loop as AioLoop
from tinyloop.aio.unix_events import SelectorEventLoop

# Seconds per wrk run (whole: wrk's -d takes no fraction) and per echo run after its warm-up.
DEFAULTS = {"repeat": 5, "duration": 2, "echo_duration": 1.5, "echo_warmup": 0.5, "warmup": 1000, "timeout": 5.0,
            "profile_duration": 3}
QUICK = {"repeat": 1, "duration": 1, "echo_duration": 0.3, "echo_warmup": 0.1, "warmup": 20, "timeout": 2.0,
         "profile_duration": 1}

# The echo loads, bytes per message; echo-10k runs only when --loads names it.
ECHO_SIZES = {"echo-1k": 1024, "echo-10k": 10 * 1024}
LOAD_TITLES = {
    "wrk": "wrk -t1 -c 100, keep-alive, GET /",
    "wrk-pipeline": "wrk -t1 -c 100, 24 requests pipelined per write",
    **{name: f"TCP echo, {size // 1024} KiB messages, {echo.CONNECTIONS} connections"
       for name, size in ECHO_SIZES.items()},
}
LOAD_NAMES = ("wrk", "wrk-pipeline", "echo-1k")   # the default run's loads


# -- The steps ----------------------------------------------------------------------------------
#
# A checkout without libuv has no tinyloop.uv, and a step on a variant build
# must choose it before tinyloop.uv._loop is imported: so nothing here imports
# tinyloop.uv until a step's loop is asked for.

def uv_missing() -> str | None:
    """Why tinyloop.uv does not import here, or None (imports it: after any uv_variants.use)."""
    return stages.get("uv").unavailable()


@dataclass(frozen=True)
class Step:
    """One row: ``move`` is what it adds to the step before; ``loop`` is "aio", "uv" or
    "uv-poll-transports" (Part III's transports on the C core); ``build`` the
    benchmarks/uv_variants.py build it runs on (None: the installed extension)."""

    key: str
    loop: str
    move: str
    build: str | None = None

    def factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """The step's loop class.  RuntimeError for a step with a ``build`` outside a process
        that chose that build first (``serve``), rather than the installed extension's loop."""
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

                _make_socket_transport = SelectorEventLoop._make_socket_transport
            return PollTransportsLoop
        return UVLoop


STEPS: tuple[Step, ...] = (
    Step("aio", "aio", "Part III's loop, pure Python (tinyloop.aio.Loop): the baseline"),
    Step("uv/poll-transports", "uv-poll-transports",
         "the run loop, handles, timers and readiness in C on libuv (Part III's transports, on uv_poll)"),
    Step("uv/no-batching", "uv", "transports on uv_tcp, each write() tried at once (uv_try_write)",
         build="no-batching"),
    Step("uv", "uv", "a turn's writes batched into one writev per transport (tinyloop.uv.Loop)"),
)
_STEPS = {step.key: step for step in STEPS}


def prepare_builds(keys: list[str]) -> None:
    """Build the variant extensions that steps ``keys`` run on, before any server waits for one."""
    for build in dict.fromkeys(_STEPS[key].build for key in keys if _STEPS[key].build):
        print(f"building tinyloop.uv's {build!r} variant (benchmarks/uv_variants.py) ...", file=sys.stderr,
              flush=True)
        uv_variants.build(build)


def serve(key: str, app: str, port: int, profile_to: str | None = None) -> int:
    """Serve ``app`` on step ``key``'s loop until SIGTERM: "http", Part III's HTTPProtocol (under
    cProfile with ``profile_to``), or "echo", benchmarks/peers/echo_server.py's Protocol."""
    step = _STEPS[key]
    if step.build is not None:
        uv_variants.use(step.build)
    if app == "echo":
        with asyncio.Runner(loop_factory=step.factory()) as runner:
            runner.run(echo_server.serve(f"echo:{key}", "protocol", port))
        return 0
    return serve_until_sigterm(f"http:{key}", step.factory(), lambda sock: serve_on(sock, "protocol"), port,
                               profile_to)


def server(key: str, app: str) -> servers.Server:
    """The harness's Server for step ``key`` serving ``app``: this module with --serve."""
    argv = (sys.executable, "-m", "benchmarks.uv_changes", "--serve", key, "--app", app, "--port", "0")
    return servers.Server(f"{app}:{key}", "variant", _STEPS[key].move, argv)


# -- The runs --------------------------------------------------------------------------------------

def measure(key: str, load: str, value: dict, pinning: dict, workdir: Path) -> dict:
    """One run of step ``key`` under ``load`` (``value``: the settings): the harness's record in
    ``run``; ``cpu_us`` server CPU µs per request or message, ``rate`` per second."""
    if load in ECHO_SIZES:
        settings = echo.Settings(duration=value["echo_duration"], warmup=value["echo_warmup"],
                                 timeout=value["timeout"])
        record = echo.measure(server(key, "echo"), ECHO_SIZES[load], settings, pinning)
        cpu, rate = record["cpu_us_per_msg"], record["msgs_per_s"]
    else:
        settings = loads.Settings(requests={}, duration=value["duration"], socket_timeout=value["timeout"],
                                  run_timeout=60.0)
        record = http_run.measure(server(key, "http"), loads.get(load), settings, pinning, workdir, value["warmup"])
        cpu, rate = record["cpu_us_per_req"], record["rps"]
    ok = record["status"] == "ok" and cpu is not None
    return {"step": key, "load": load, "status": record["status"], "note": record["note"],
            "cpu_us": cpu if ok else None, "rate": rate if ok else None, "run": record}


def summarize(steps: list[str], load_names: list[str], records: list[dict]) -> list[dict]:
    """One row per (load, step): ``cpu_us`` and ``rate`` over the runs that succeeded, each
    summary.summarize's {median, min, max, noisy} or None; ``speedup_previous`` (``speedup_aio``)
    is the step above's (aio's) median CPU over this one's: above 1, this step costs less."""
    rows = []
    for load in load_names:
        first = previous = None
        for key in steps:
            runs = [r for r in records if r["load"] == load and r["step"] == key]
            ok = [r for r in runs if r["cpu_us"] is not None]
            cpu = summary.summarize([r["cpu_us"] for r in ok])
            median = cpu["median"] if cpu else None
            rows.append({"load": load, "step": key, "runs": len(runs), "ok_runs": len(ok), "cpu_us": cpu,
                         "rate": summary.summarize([r["rate"] for r in ok]),
                         "notes": sorted({r["note"] for r in runs if r["note"]}),
                         "speedup_previous": previous / median if previous and median else None,
                         "speedup_aio": first / median if first and median else None})
            first = median if key == "aio" else first
            previous = median
    return rows


def _times(ratio: float | None) -> str:
    return DASH if ratio is None else f"×{ratio:.2f}"


def render(data: dict) -> str:
    """The JSON's tables as Markdown (MyST), with their legend: the libuv chapter includes it whole."""
    out = [*quick_caption(data),
           "Server CPU time per request (HTTP) or message (echo), in µs: median of the interleaved runs "
           "(min–max). Each step adds one move to the step above it; speed-up is the CPU time of the step "
           "above (or of `aio`) divided by this step's.", ""]
    for load in data["plan"]["loads"]:
        unit = "message" if load in ECHO_SIZES else "request"
        rows = [row for row in data["rows"] if row["load"] == load]
        table = [[f"`{row['step']}`", data["steps"][row["step"]]["move"], median_cell(row["cpu_us"], 1),
                  number(row["rate"] and row["rate"]["median"]), _times(row["speedup_previous"]),
                  _times(row["speedup_aio"])] for row in rows]
        header = ["step", "the move it adds", f"CPU µs per {unit}", f"{unit}s/s", "speed-up over the step above",
                  "over aio"]
        notes = [f"- `{row['step']}`: {note}" for row in rows for note in row["notes"]]
        out += [f"**{data['loads'][load]}**", "", *markdown(header, table, 2), "", *notes, *([""] if notes else [])]
    return "\n".join([*out, footer(data)]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: server CPU per request under wrk, step by step."""
    return experiment.sentence("uv_changes: wrk, server CPU µs per request by step", [
        f"{row['step']} {row['cpu_us']['median']:.1f}"
        for row in data["rows"] if row["load"] == "wrk" and row["cpu_us"]])


# -- The profile ----------------------------------------------------------------------------------

# cProfile sees no Cython method: on uv, the own time of Part II's run_forever, which
# calls the C loop, is the C loop's (uv_run, epoll_wait, read, writev); on aio, a few lines.
C_LOOP = "the loop in C: tinyloop.uv, libuv, syscalls"

# What the profile counts per request (on uv, recv and send are called from C and count 0).
_COUNTED = (
    ("data_received", ("(data_received)",)),
    ("call_soon", ("call_soon)",)),
    ("recv", ("'recv' of '_socket",)),
    ("send", ("'send' of '_socket", "'sendmsg' of '_socket")),
)


def _uv_layer(function: tuple[str, int, str]) -> str | None:
    """The harness's layers, with the own time of run_forever on a uv loop as the C loop's."""
    path, _, name = function
    return C_LOOP if path.endswith("tinyloop/callbacks/loop.py") and name == "run_forever" else layer(function)


def profile(key: str, duration: float, pinning: dict, warmup: int) -> str:
    """Step ``key``'s HTTP server under cProfile: ``warmup`` GET / on one keep-alive
    connection, then ``wrk -t1 -c 100 -d DURATION``; the summary by layer, as text."""
    settings = loads.Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
    stats, served = profiled(f"http:{key}", server(key, "http").argv, pinning, warmup,
                             lambda process: variants.run_load(loads.get("wrk"), settings, process.port, pinning))
    on_uv = key.startswith("uv")
    text = profile_summary(stats, served, f"{key} ({_STEPS[key].move}): {warmup} GET / to warm up, "
                                          f"then wrk -t1 -c 100 -d {duration:g}s", _COUNTED,
                           _uv_layer if on_uv else layer)
    if on_uv:
        text += ("\n  (cProfile sees no Cython method: the C loop's layer is the own time of run_forever,\n"
                 "  which calls it; a C method that a callback calls, such as transport.write, counts in\n"
                 "  that callback's layer; recv and send are made from C, so cProfile counts none of them)\n")
    return text


# -- System calls per request ---------------------------------------------------------------------

def count_syscalls(keys: list[str], load_names: list[str], duration: float, pinning: dict, warmup: int) -> str:
    """The system calls of each step in ``keys`` under each load in ``load_names`` (wrk, wrk-pipeline:
    per answered request; echo: per echoed message), one fresh server each; a text table: reads,
    writes, waits, requests per wait (what one turn answers), the most frequent calls."""
    lines = [f"{'step':<20} {'load':<13} {'requests':>8} {'read':>6} {'write':>6} {'wait':>6} "
             f"{'req/wait':>8} {'total':>6}  calls per request or message"]
    with tempfile.TemporaryDirectory(prefix="tinyloop-uv-syscalls-") as workdir:
        for load in (name for name in load_names if name in syscalls.DEPTH_LOADS.values() or name in ECHO_SIZES):
            for key in keys:
                record = _syscalls(key, load, duration, pinning, Path(workdir), warmup)
                figures = record.get("per_request")
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


def _syscalls(key: str, load: str, duration: float, pinning: dict, workdir: Path, warmup: int) -> dict:
    """``strace -c -f`` on a fresh server of step ``key`` over one run of ``load`` (``duration``
    seconds, after ``warmup`` GET / or a second of echo, unmeasured): syscalls.measure's record,
    ``requests`` answered (or messages echoed), ``calls`` and ``per_request``, or a ``note``."""
    app = "echo" if load in ECHO_SIZES else "http"
    # The server's name names strace's output file: no "/" in it.
    named = dataclasses.replace(server(key, app), name=f"{app}-{key.replace('/', '-')}")
    if app == "http":
        depth = next(depth for depth, name in syscalls.DEPTH_LOADS.items() if name == load)
        settings = loads.Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
        return syscalls.measure(named, depth, settings, pinning, workdir, warmup)
    process, failure = servers.start(named, pinning["server_prefix"])
    if process is None:
        return {"note": failure[1]}
    echo_settings = echo.Settings(duration=duration, warmup=1.0, timeout=5.0)

    def echo_client(seconds: float) -> int:
        command = echo.client_command(process.port, ECHO_SIZES[load], seconds, echo_settings)
        code, text = experiment.run_tool([*pinning["load_prefix"], *command], seconds + echo_settings.timeout + 10)
        result = echo.parse_client(text) if code == 0 else None
        return int(result["messages"]) if result else 0

    trace = workdir / f"{named.name}-{load}.strace"
    try:
        echo_client(echo_settings.warmup)
        with strace.Strace(process.pid, ["-c"], trace):
            messages = echo_client(duration)
    except RuntimeError as error:
        return {"note": str(error)}
    finally:
        process.stop()
    calls = strace.parse_strace_summary(trace.read_text()) if trace.exists() else {}
    if not messages or not calls:
        return {"note": "no message echoed, or strace counted no call"}
    return {"requests": messages, "calls": calls, "per_request": syscalls.per_request(calls, messages)}


# -- The command line -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = experiment.parser("uv_changes", __doc__, repeat=DEFAULTS["repeat"])
    parser.add_argument("--steps", help=f"comma list, kept in order (default all: {', '.join(_STEPS)})")
    parser.add_argument("--loads", help=f"comma list (default {','.join(LOAD_NAMES)}; also "
                                        f"{', '.join(name for name in LOAD_TITLES if name not in LOAD_NAMES)})")
    variants.add_arguments(parser, list(_STEPS), "uv,aio", "(steps' HTTP servers) under wrk -t1 -c 100, by layer, "
                                                          "into profile_uv.txt", timings=False)
    parser.add_argument("--syscalls", nargs="?", const="uv/no-batching,uv", metavar="STEPS",
                        help="instead: count these steps' system calls per request or echoed message under "
                             "strace, with the loads of --loads, into uv_changes_syscalls.txt beside the JSON "
                             "(default uv/no-batching,uv)")
    parser.add_argument("--app", choices=("http", "echo"), default="http", help="--serve's program (default http)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.serve:   # first: a variant's build must be chosen before tinyloop.uv is imported
        return serve(args.serve, args.app, args.port, args.profile_to)
    if (missing := uv_missing()) is not None:
        raise SystemExit(f"uv_changes: tinyloop.uv is not available here: {missing}")
    value = experiment.settings(parser, args, DEFAULTS, QUICK)
    out = output.json_path(parser, args, "uv_changes.json")
    pinning = experiment.pinning(args)
    steps = list(_STEPS)
    load_names = list(LOAD_NAMES) if args.loads in (None, "all") else [
        name for name in LOAD_TITLES if name in choose_names(args.loads, list(LOAD_TITLES), "load", [])]
    if args.syscalls or args.profile:
        keys = choose_names(args.syscalls or args.profile, steps, "step", steps)
    else:   # a run keeps STEPS' order: each row's speed-up is over the row above
        keys = [key for key in steps if key in choose_names(args.steps, steps, "step", steps)]
    prepare_builds(keys)
    if set(ECHO_SIZES) & set(load_names) and (failure := echo.prepare_client()) is not None:
        raise SystemExit(f"uv_changes: the echo client cannot be built: {failure}")
    if args.syscalls:
        text = count_syscalls(keys, load_names, value["duration"] + 1, pinning, value["warmup"])
        command = display(["python", "-m", "benchmarks.uv_changes", *argv])
        text += ("\nServer system calls per answered request (wrk) or echoed message (echo), strace -c -f on the "
                 f"server over one run (benchmarks/syscalls.py); {command}; load average {os.getloadavg()[0]:.2f} "
                 "at the end\n")
        return output.print_and_write(text, out.with_name("uv_changes_syscalls.txt"))
    if args.profile:
        text = "\n".join(profile(key, value["profile_duration"], pinning, value["warmup"]) for key in keys)
        return variants.write_profile(text, "uv_changes", argv, out.with_name("profile_uv.txt"))
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-uv-changes-") as workdir:
        records = experiment.interleave(
            [(load, key) for load in load_names for key in keys], value["repeat"],
            lambda cell: measure(cell[1], cell[0], value, pinning, Path(workdir)),
            lambda cell: f"{cell[0]:<12} {cell[1]:<18}",
            lambda r: f"{r['cpu_us'] or 0:.1f} µs CPU  {r['rate'] or 0:.0f}/s")
    versions = servers.tool_versions()
    data = experiment.document(
        "uv_changes", argv, clock, pinning=pinning, tools={"wrk": versions.get("wrk"), "cc": versions.get("cc")},
        settings={**value, "quick": args.quick, "echo_sizes_bytes": ECHO_SIZES, "echo_connections": echo.CONNECTIONS,
                  "cpu_source": "the server process's CPU-time clock (benchmarks/run.py)"},
        plan={"steps": keys, "loads": load_names}, loads={name: LOAD_TITLES[name] for name in load_names},
        steps={step.key: {"move": step.move, "loop": step.loop, "build": step.build or "installed"}
               for step in STEPS if step.key in keys},
        rows=summarize(keys, load_names, records), runs=records)
    return experiment.conclude(data, out, clock, render, conclusion, ".md")


if __name__ == "__main__":
    sys.exit(main())
