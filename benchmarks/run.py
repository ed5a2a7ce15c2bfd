# benchmarks/run.py
"""Measure every stage's server and the peers under ab and wrk.

    python -m benchmarks.run                     every stage, every peer, 3 loads, 3 repetitions
    python -m benchmarks.run --quick             a smoke run: tiny loads, 1 repetition
    python -m benchmarks.run --stages epoll,poll --peers asyncio-protocol --loads ab-close
    python -m benchmarks.run --list              what can run here, and why not the rest
    python -m benchmarks.run --loads wrk-pipeline   Japronto's load: 24 requests pipelined per write

Writes benchmarks/results/local/latest.json (a timestamped copy under runs/) and latest.png, and
prints a table per load (benchmarks/report.py); benchmarks/README.md has the options and the rules.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import loads, report, servers
from benchmarks.harness import experiment, output
from benchmarks.harness.machine import display
from benchmarks.harness.output import RESULTS, relative
from benchmarks.harness.process import CPU_SOURCE, choose_names, cpu_seconds, minor_faults
from benchmarks.loads import Load, Settings
from benchmarks.servers import Server
from tinyloop.testing import recv_response

REFERENCE = RESULTS / "latest.json"     # the book's, committed; only --reference writes it
LOCAL = output.LOCAL / "latest.json"      # a user's run: ignored by git

# The default run (11 stages, 7 peers, 3 loads, 3 repetitions) takes about ten minutes on 2 cores.
# A key with an option is its name (``timeout``: ab -s, wrk --timeout); ``warmup`` requests go on
# one keep-alive connection before each load, unmeasured.
DEFAULTS = {"ab-close": 5000, "ab-keepalive": 20000, "duration": 5.0, "repeat": 3,
            "timeout": 5.0, "run_timeout": 60.0, "warmup": 1000}
QUICK = {"ab-close": 200, "ab-keepalive": 1000, "duration": 1.0, "repeat": 1,
         "timeout": 2.0, "run_timeout": 15.0, "warmup": 20}
LEAST = {"duration": 1, "timeout": 0.1, "run_timeout": 1, "repeat": 1, "warmup": 1}
AB_LOADS = ("ab-close", "ab-keepalive")


def _requests(argument: str) -> dict[str, int]:
    """``--requests``: ``"5000"`` sets both ab loads, ``"ab-close=5000,ab-keepalive=20000"`` each."""
    pairs = ([part.split("=") for part in argument.split(",")] if "=" in argument
             else [(name, argument) for name in AB_LOADS])
    given = {name.strip(): int(value) for name, value in pairs}
    if set(given) - set(AB_LOADS) or min(given.values()) < 1:
        raise ValueError(argument)
    return given


def build_parser() -> argparse.ArgumentParser:
    parser = experiment.parser("run", __doc__, repeat=DEFAULTS["repeat"], results="NAME.json")
    default_loads = ", ".join(load.name for load in loads.LOADS if load.default)
    parser.add_argument("--stages", help="comma list, 'all' or 'none' (default all)")
    parser.add_argument("--peers", help="comma list, 'all' or 'none' (default all but stall)")
    parser.add_argument("--loads", help=f"comma list, or 'all' (default {default_loads})")
    parser.add_argument("--requests", type=_requests, default={},
                        help="ab's -n: N for both ab loads, or ab-close=N,ab-keepalive=M (default 5000, 20000)")
    parser.add_argument("--duration", type=float, help=f"wrk's -d in seconds (default {DEFAULTS['duration']:g})")
    parser.add_argument("--timeout", type=float, help="seconds ab (-s) and wrk (--timeout) wait on a silent "
                                                      f"server (default {DEFAULTS['timeout']:g})")
    parser.add_argument("--run-timeout", type=float,
                        help=f"wall-clock limit on one ab run, seconds (default {DEFAULTS['run_timeout']:g})")
    parser.add_argument("--name", default="latest", help="the results' file name without .json (default latest)")
    parser.add_argument("--plot", type=Path, help="where to draw the PNG (default: --out with .png)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    parser.add_argument("--list", action="store_true", help="list the servers and loads, and whether each can run")
    return parser


class Newcomer(threading.Thread):
    """One GET / on a new connection, sent ``delay`` seconds into a load: wrk counts only answered
    requests, so a server that serves one connection of 100 looks fast to it, unless a newcomer
    goes unanswered.  ``latency_ms``: its wait in ms; ``answered_at``: time.monotonic() then (or None)."""

    def __init__(self, address: tuple[str, int], delay: float, timeout: float) -> None:
        super().__init__(daemon=True)
        self.address, self.delay = address, delay
        self.latency_ms: float | None = None
        self.answered_at: float | None = None
        self._over = threading.Event()
        self._sock = socket.socket()
        self._sock.settimeout(timeout)

    def run(self) -> None:
        with self._sock:
            if self._over.wait(self.delay):
                return
            try:
                self._sock.connect(self.address)
                sent = time.monotonic()
                self._sock.sendall(b"GET / HTTP/1.1\r\nHost: newcomer\r\nConnection: close\r\n\r\n")
                if recv_response(self._sock)[0] == 200:
                    self.answered_at = time.monotonic()
                    self.latency_ms = (self.answered_at - sent) * 1000
            except (OSError, ValueError, IndexError):
                pass  # no answer: the caller sees answered_at is None

    def finish(self) -> None:
        """Stop waiting (the load is over; shutdown wakes the thread's recv) and return once it ended."""
        self._over.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected, or closed already
        self.join(self._sock.gettimeout())


def measure(server: Server, load: Load, settings: Settings, pinning: dict, workdir: Path,
            warmup: int = 1) -> dict:
    """Start ``server``, warm it up with ``warmup`` requests, put ``load`` on it, stop it; returns the
    run's record, its ``status`` ``"ok"``, ``"timeout"``, ``"starved"`` (:class:`Newcomer`) or
    ``"error"`` (report.py's docstring), ``note`` saying what happened."""
    record: dict = {"server": server.name, "load": load.name, "status": "error", "note": None,
                    **dict.fromkeys(("rps", "p50_ms", "p99_ms", "completed", "failed", "cpu_s", "cpu_us_per_req",
                                     "faults_per_req", "seconds", "newcomer_ms"))}
    process, failure = servers.start(server, pinning["server_prefix"], warmup, settings.socket_timeout)
    if failure is not None:
        record["status"], record["note"] = failure
        return record
    newcomer = None
    try:
        if load.tool == "wrk":
            newcomer = Newcomer(process.address, settings.duration / 2, settings.duration + settings.socket_timeout)
            newcomer.start()
        before, faults_before = cpu_seconds(process), minor_faults(process)
        try:
            result, _, text = loads.run(load, f"http://{process.host}:{process.port}/", settings, workdir,
                                        pinning["load_prefix"])
        finally:
            load_ended = time.monotonic()
            after, faults_after = cpu_seconds(process), minor_faults(process)
            if newcomer is not None:
                newcomer.finish()
        exit_code = process.proc.poll() if process.proc else None
        cpu = None if before is None or after is None else after - before
        faults = None if faults_before is None or faults_after is None else faults_after - faults_before
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms, completed=result.completed,
                      failed=result.failed, seconds=result.seconds, cpu_s=None if cpu is None else round(cpu, 6),
                      cpu_us_per_req=cpu * 1e6 / result.completed if cpu is not None and result.completed else None,
                      faults_per_req=faults / result.completed if faults is not None and result.completed else None,
                      newcomer_ms=None if newcomer is None else newcomer.latency_ms)
        tail = (text.strip().splitlines()[-1:] or ["no output"])[0]
        starved = newcomer is not None and (newcomer.answered_at is None or newcomer.answered_at > load_ended)
        record["status"], record["note"] = (
            ("error", f"the server exited with code {exit_code} during the run") if exit_code is not None
            else ("timeout", result.error) if result.timed_out
            else ("error", result.error or f"could not read the tool's output: {tail}") if result.completed is None
            else ("timeout", f"no response in the {result.seconds:.1f} s run") if result.completed == 0
            else ("starved", f"a connection opened {settings.duration / 2:g} s into the load got no answer "
                             f"before it ended ({result.completed} requests went to the others)") if starved
            else ("ok", result.error))
        return record
    finally:
        process.stop()


FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")


def summarize(runs: list[dict], baseline: str | None) -> dict[str, dict[str, dict]]:
    """``{load: {server: summary}}``: the harness's one fold (experiment.fold) of FIGURES,
    ``completed`` and ``newcomer_ms``; req/s and CPU µs/req decide whether a row is noisy,
    and ``ratio`` divides FIGURES by the ``baseline`` server's in the same load."""
    return experiment.fold(runs, "load", "server", (*FIGURES, "completed", "newcomer_ms"),
                           deciding=("rps", "cpu_us_per_req"), baseline=baseline, ratios=FIGURES)


def _show(record: dict) -> str:
    """A run's progress line: ``8123 req/s p99 3.1 ms cpu 95 µs/req`` (0 for a missing figure)."""
    failed = f" {record['failed']} failed" if record["failed"] else ""
    return (f"{record['rps'] or 0:.0f} req/s p99 {record['p99_ms'] or 0:.1f} ms "
            f"cpu {record['cpu_us_per_req'] or 0:.0f} µs/req{failed}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.out = output.json_path(parser, args, f"{args.name}.json")
    pick = experiment.settings(parser, args, DEFAULTS, QUICK, LEAST)
    settings = Settings(requests={**{name: int(pick[name]) for name in AB_LOADS}, **args.requests},
                        duration=pick["duration"], socket_timeout=pick["timeout"], run_timeout=pick["run_timeout"])
    repeat, warmup = int(pick["repeat"]), int(pick["warmup"])
    candidates = servers.choose(args.stages, args.peers)
    chosen = [loads.get(name) for name in choose_names(args.loads, [load.name for load in loads.LOADS], "load",
                                                       [load.name for load in loads.LOADS if load.default])]
    ready, skipped = experiment.prepared(candidates, servers.prepare, None if args.list else "run")
    if args.list:
        for server in candidates:
            print(server.status(skipped.get(server.name)))
        for load in loads.LOADS:
            state = "ready" if shutil.which(load.tool) else f"skipped: {load.tool} is not installed"
            print(f"load   {load.name:<16}  {state}  ({load.title})")
        return 0
    experiment.require("run", *sorted({load.tool for load in chosen}))
    pinning = experiment.pinning(args)
    width = max(len(server.name) for server in ready)
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-bench-") as workdir:
        records = experiment.interleave(
            [(load, server) for load in chosen for server in ready], repeat,
            lambda cell: measure(cell[1], cell[0], settings, pinning, Path(workdir), warmup),
            lambda cell: f"{cell[1].name:<{width}} {cell[0].name:<12}", _show)
    baseline = servers.BASELINE if any(s.name == servers.BASELINE for s in ready) else None
    data = experiment.document(
        "run", argv, clock, pinning=pinning, tools=servers.tool_versions(),
        settings={"quick": args.quick, "repeat": repeat, "requests": settings.requests,
                  "warmup_requests": warmup, "duration_s": settings.duration,
                  "socket_timeout_s": settings.socket_timeout, "run_timeout_s": settings.run_timeout,
                  "cpu_source": CPU_SOURCE,
                  "order": "interleaved: each repetition runs every load on every server; "
                           "a fresh server process per run; figures are medians over repetitions"},
        baseline=baseline, loads=[_load_entry(load, settings) for load in chosen],
        servers=[server.entry(skipped.get(server.name)) for server in candidates],
        runs=records, results=summarize(records, baseline))
    if not args.no_plot:  # before the table, whose conclusion is the last line printed
        png = args.plot or args.out.with_suffix(".png")
        try:
            print(f"drew {relative(report.plot(data, None, png))}")
        except ImportError:
            print("note: matplotlib is not installed, so no plot (pip install matplotlib)")
    hint = ("" if args.out.resolve() == REFERENCE.resolve() else
            "\nthe book shows the reference run (benchmarks/results/latest.json); to see yours "
            f"in it, build with -D book_bench_results={relative(args.out)}")
    return experiment.conclude(data, args.out, clock, lambda data: report.format_text(data) + hint, conclusion,
                               None, keep_copy=True)


def _load_entry(load: Load, settings: Settings) -> dict:
    """``load``'s entry in the JSON's ``loads``, its command as a reader would type it."""
    csv_path = Path("PERCENTILES.csv") if load.tool == "ab" else None
    return {"name": load.name, "tool": load.tool, "title": load.title, "measures": load.measures,
            "concurrency": load.concurrency, "keepalive": load.keepalive,
            "requests": settings.requests.get(load.name) if load.tool == "ab" else None,
            "duration_s": settings.duration if load.tool == "wrk" else None,
            "command": display(loads.command(load, "http://127.0.0.1:PORT/", settings, csv_path)),
            # Only a pipelined load says so: the other loads' entries stay as they were.
            **({"pipeline": load.pipeline} if load.pipeline > 1 else {})}


def conclusion(data: dict) -> str:
    """The run in one line: under wrk (else the first load), the stage with the least server CPU
    per request, against the baseline's."""
    load = "wrk" if "wrk" in data["results"] else next(iter(data["results"]), "?")
    results = data["results"].get(load, {})
    stage_names = [server["name"] for server in data["servers"] if server["kind"] == "stage"]
    least = experiment.least({name: row.get("cpu_us_per_req") for name, row in results.items()},
                             data.get("baseline"), 0, among=[name for name in results if name in stage_names])
    return f"{load}: " + (f"server CPU per request, least among the stages: {least}" if least
                          else "no stage measured")


if __name__ == "__main__":
    raise SystemExit(main())
