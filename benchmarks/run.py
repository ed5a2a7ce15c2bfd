# benchmarks/run.py
"""Measure every stage's server and the peers under ab and wrk.

    python benchmarks/run.py                     every stage, every peer, 3 loads, 3 repetitions
    python benchmarks/run.py --quick             a smoke run: tiny loads, 1 repetition
    python benchmarks/run.py --stages epoll,poll --peers asyncio-protocol --loads ab-close
    python benchmarks/run.py --list              what can run here, and why not the rest
    python benchmarks/run.py --loads wrk-pipeline   Japronto's load: 24 requests pipelined per write

Writes benchmarks/results/local/latest.json (and a timestamped copy under
benchmarks/results/local/runs/), prints one table per load with each row's
spread, and draws benchmarks/results/local/latest.png.  That directory is
ignored by git: a run dirties nothing.  The book shows the committed
reference run, benchmarks/results/latest.json, which only ``--reference``
(a maintainer refreshing it on purpose) overwrites.
``python benchmarks/report.py`` prints the tables again from a saved JSON.
"""

# Rules this file keeps:
#
#   * Repetitions are interleaved: repetition 1 runs every load on every
#     server, then repetition 2 does it again, and so on.  Whatever drifts on
#     the machine while we measure (a cron job, thermal throttling) then
#     spreads over every server instead of landing on one.  Each figure
#     reported is the median of the repetitions, with its spread (min and
#     max); a row whose repetitions differ by more than NOISE (25%)
#     is flagged noisy, in the JSON and in the tables.
#   * A user's run writes under benchmarks/results/local/ (ignored by git);
#     the committed reference results change only with --reference.
#   * Every run gets a fresh server process: started, warmed up with GET /
#     on one keep-alive connection (the first answer also says it is up),
#     loaded once, stopped.  No run inherits another's connections or memory.
#   * With two or more CPUs the server runs on one and the load generator on
#     another (taskset), so they never take turns on the same core.  On a
#     two-core machine the load generator is then the first to saturate, which
#     is why the table's headline figure is CPU time per request (see
#     report.FOOTNOTES).
#   * Nothing hangs and nothing is left behind: the tools have time-outs
#     (benchmarks/loads.py), servers are stopped in ``finally`` blocks, and a
#     run that fails becomes a row that says how it failed.

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make ``benchmarks`` importable

from benchmarks import loads, report, servers  # noqa: E402
from benchmarks.harness import output  # noqa: E402
from benchmarks.harness.machine import display, fingerprint  # noqa: E402
from benchmarks.harness.output import LOCAL as LOCAL_DIR  # noqa: E402
from benchmarks.harness.output import RESULTS, minutes, relative, write_json  # noqa: E402
from benchmarks.harness.process import (CPU_SOURCE, choose_names, choose_pinning, cpu_seconds,  # noqa: E402
                                        warm_up)
from benchmarks.harness.summary import is_noisy, median  # noqa: E402
from benchmarks.loads import Load, Settings  # noqa: E402
from benchmarks.servers import Server  # noqa: E402
from tinyloop import stages  # noqa: E402
from tinyloop.testing import recv_response  # noqa: E402

REFERENCE = RESULTS / "latest.json"     # the book's, committed; only --reference writes it
LOCAL = LOCAL_DIR / "latest.json"        # a user's run: ignored by git
SCHEMA = 1

# Sized so that the default run (11 stages, 7 peers, 3 loads, 3 repetitions)
# takes about ten minutes on a 2-core machine; --quick is for tests.
DEFAULTS = {"ab-close": 5000, "ab-keepalive": 20000, "duration": 5.0, "repeat": 3,
            "socket_timeout": 5.0, "run_timeout": 60.0, "warmup": 1000}
QUICK = {"ab-close": 200, "ab-keepalive": 1000, "duration": 1.0, "repeat": 1,
         "socket_timeout": 2.0, "run_timeout": 15.0, "warmup": 20}

# Rough speeds for the estimate printed at start (a Python stage on one core).
_ESTIMATE_RPS = {"ab-close": 4000, "ab-keepalive": 12000, "warm-up": 8000}
_ESTIMATE_OVERHEAD = 0.3  # seconds to start, warm up and stop a server


# --- choosing what to run -------------------------------------------------

def _requests(argument: str | None, base: dict[str, int]) -> dict[str, int]:
    """``"5000"`` sets both ab loads; ``"ab-close=5000,ab-keepalive=20000"`` sets each."""
    out = dict(base)
    if argument is None:
        return out
    try:
        if "=" not in argument:
            return {name: int(argument) for name in out}
        for part in argument.split(","):
            name, _, value = part.partition("=")
            if name.strip() not in out:
                raise SystemExit(f"run.py: --requests: {name.strip()!r} is not an ab load; "
                                 f"choose from: {', '.join(out)}")
            out[name.strip()] = int(value)
    except ValueError:
        raise SystemExit(f"run.py: --requests: expected N or LOAD=N[,LOAD=N], got {argument!r}") from None
    if any(n < 1 for n in out.values()):
        raise SystemExit("run.py: --requests must be at least 1")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    stage_names = ", ".join(stage.name for stage in stages.STAGES)
    peer_names = ", ".join(peer.name for peer in servers.PEERS)
    load_names = ", ".join(load.name for load in loads.LOADS if load.default)
    extra_loads = ", ".join(load.name for load in loads.LOADS if not load.default)
    parser.add_argument("--quick", action="store_true",
                        help="tiny loads, one repetition, short time-outs: a smoke test, not a measurement")
    parser.add_argument("--stages", help=f"comma list, 'all' or 'none' (default all: {stage_names})")
    parser.add_argument("--peers", help=f"comma list, 'all' or 'none' (default all but stall: {peer_names})")
    parser.add_argument("--loads", help=f"comma list, or 'all' (default: {load_names}; "
                                        f"only when named, or with 'all': {extra_loads})")
    parser.add_argument("--repeat", type=int, help="repetitions, interleaved (default 3; --quick 1)")
    parser.add_argument("--requests", help="ab's -n: N for both ab loads, or ab-close=N,ab-keepalive=M "
                                           f"(default ab-close={DEFAULTS['ab-close']},"
                                           f"ab-keepalive={DEFAULTS['ab-keepalive']})")
    parser.add_argument("--duration", type=float, help=f"wrk's -d in seconds (default {DEFAULTS['duration']:g})")
    parser.add_argument("--timeout", type=float,
                        help="seconds a tool waits on a silent server: ab -s, wrk --timeout "
                             f"(default {DEFAULTS['socket_timeout']:g})")
    parser.add_argument("--run-timeout", type=float,
                        help=f"wall-clock limit on one ab run, seconds (default {DEFAULTS['run_timeout']:g})")
    parser.add_argument("--warmup", type=int,
                        help="requests sent on one keep-alive connection before each load, not measured "
                             f"(default {DEFAULTS['warmup']}; --quick {QUICK['warmup']})")
    output.add_arguments(parser, "NAME.json")  # and its plot; a timestamped copy goes to runs/ beside it
    parser.add_argument("--name", default="latest",
                        help="the results' file name without .json (default latest; the book's pipelined "
                             "table is --loads wrk-pipeline --name pipeline)")
    parser.add_argument("--plot", type=Path, help="where to draw the PNG (default: --out with .png)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and load generator to CPUs")
    parser.add_argument("--list", action="store_true", help="list the servers and loads, whether each can run, and exit")
    parser.add_argument("--syscalls", action="store_true",
                        help="afterwards, count system calls per request on the same servers under strace, "
                             "at pipelining depth 1 and 24 (benchmarks/syscalls.py: syscalls.json and .md "
                             "beside the JSON; with --reference, the book's)")
    return parser


# --- one run ------------------------------------------------------------

class Newcomer(threading.Thread):
    """One GET / on a new connection, sent ``delay`` seconds into a load.

    wrk counts only the requests that were answered, so a server that serves
    one connection and leaves the other 99 waiting (the blocking baseline)
    looks fast to it.  A newcomer that gets no answer while the load lasts
    shows that.  ``latency_ms`` is its wait in milliseconds, or None;
    ``answered_at`` the ``time.monotonic()`` of its answer, or None.
    """

    def __init__(self, address: tuple[str, int], delay: float, timeout: float) -> None:
        super().__init__(daemon=True)
        self.address, self.delay, self.timeout = address, delay, timeout
        self.latency_ms: float | None = None
        self.answered_at: float | None = None
        self._cancelled = threading.Event()
        self._sock: socket.socket | None = None

    def run(self) -> None:
        if self._cancelled.wait(self.delay):
            return
        try:
            with socket.create_connection(self.address, timeout=self.timeout) as sock:
                self._sock = sock
                if self._cancelled.is_set():
                    return  # the load ended while we connected
                sent = time.monotonic()
                sock.sendall(b"GET / HTTP/1.1\r\nHost: newcomer\r\nConnection: close\r\n\r\n")
                status, _, _ = recv_response(sock)
                if status == 200:
                    self.answered_at = time.monotonic()
                    self.latency_ms = (self.answered_at - sent) * 1000
        except (OSError, ValueError, IndexError):
            pass  # no answer: the caller sees answered_at is None

    def finish(self) -> None:
        """Stop waiting (the load is over) and return once the thread has ended."""
        self._cancelled.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's recv
            except OSError:
                pass
        self.join(self.timeout)


def measure(server: Server, load: Load, settings: Settings, pinning: dict, workdir: Path,
            warmup: int = 1) -> dict:
    """Start ``server``, warm it up with ``warmup`` requests, put ``load`` on it, stop it.

    Returns the run's JSON record: ``status`` is ``"ok"``, ``"timeout"`` (the
    tool or the warm-up waited in vain), ``"starved"`` (wrk's figures are real,
    but a newcomer got no answer while the load lasted: see
    :class:`Newcomer`) or ``"error"`` (the server did not start, answered
    wrongly, or died); ``note`` says what happened.
    """
    record: dict = {"server": server.name, "load": load.name, "status": "error", "note": None,
                    "rps": None, "p50_ms": None, "p99_ms": None, "completed": None, "failed": None,
                    "cpu_s": None, "cpu_us_per_req": None, "seconds": None, "newcomer_ms": None}
    try:
        process = servers.launch(server, pinning["server_prefix"])
    except RuntimeError as error:
        record["note"] = "did not start: " + " | ".join(str(error).strip().splitlines()[:3])
        return record
    try:
        failure = warm_up(process.address, warmup, settings.socket_timeout)
        if failure is not None:
            record["status"], record["note"] = failure
            return record
        url = f"http://{process.host}:{process.port}/"
        newcomer = None
        if load.tool == "wrk":
            newcomer = Newcomer(process.address, settings.duration / 2,
                                settings.duration + settings.socket_timeout)
            newcomer.start()
        before = cpu_seconds(process)
        try:
            result, _, output = loads.run(load, url, settings, workdir, pinning["load_prefix"])
        finally:
            load_ended = time.monotonic()
            after = cpu_seconds(process)
            if newcomer is not None:
                newcomer.finish()
        exit_code = process.proc.poll() if process.proc else None
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                      completed=result.completed, failed=result.failed, seconds=result.seconds)
        if newcomer is not None:
            record["newcomer_ms"] = newcomer.latency_ms
        if before is not None and after is not None:
            record["cpu_s"] = round(after - before, 6)
            if result.completed:
                record["cpu_us_per_req"] = (after - before) * 1e6 / result.completed
        if exit_code is not None:
            record["note"] = f"the server exited with code {exit_code} during the run"
        elif result.timed_out:
            record["status"] = "timeout"
            record["note"] = result.error
        elif result.completed is None:
            tail = output.strip().splitlines()[-1:] or ["no output"]
            record["note"] = result.error or f"could not read the tool's output: {tail[0]}"
        elif result.completed == 0:
            record["status"] = "timeout"
            record["note"] = f"no response in the {result.seconds:.1f} s run"
        elif newcomer is not None and (newcomer.answered_at is None or newcomer.answered_at > load_ended):
            record["status"] = "starved"
            record["note"] = (f"a connection opened {newcomer.delay:g} s into the load got no answer "
                              f"before it ended ({result.completed} requests went to the others)")
        else:
            record["status"] = "ok"
            if result.error:
                record["note"] = result.error
        return record
    finally:
        process.stop()


# --- medians and ratios -------------------------------------------------

FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")


def summarize(runs: list[dict], baseline: str | None) -> dict[str, dict[str, dict]]:
    """Fold the run records into ``{load: {server: summary}}``.

    A summary's figures (FIGURES, ``completed``, ``newcomer_ms``) are medians over the
    runs whose status is ``"ok"``; ``spread`` holds each FIGURES' ``[min, max]``
    over those runs, and ``noisy`` is true when two or more of them differ by
    more than ``NOISE`` in req/s or CPU µs/req; ``failed`` is the sum
    over every run.
    ``status`` is ``"ok"`` when every run was, the failing runs' status when
    none was, and ``"partial"`` in between.  ``ratio`` divides each figure by
    the ``baseline`` server's in the same load (None where either is missing).
    """
    grouped: dict[str, dict[str, list[dict]]] = {}
    for run in runs:
        grouped.setdefault(run["load"], {}).setdefault(run["server"], []).append(run)
    results: dict[str, dict[str, dict]] = {}
    for load_name, by_server in grouped.items():
        table: dict[str, dict] = {}
        for server_name, server_runs in by_server.items():
            ok = [run for run in server_runs if run["status"] == "ok"]
            bad = [run for run in server_runs if run["status"] != "ok"]
            summary: dict = {"runs": len(server_runs), "ok_runs": len(ok)}
            for figure in (*FIGURES, "completed", "newcomer_ms"):
                summary[figure] = median([run[figure] for run in ok])
            summary["spread"] = {}
            for figure in FIGURES:
                values = [run[figure] for run in ok if run[figure] is not None]
                summary["spread"][figure] = [min(values), max(values)] if values else None
            summary["noisy"] = len(ok) >= 2 and any(
                is_noisy(low_high)
                for figure, low_high in summary["spread"].items() if figure in ("rps", "cpu_us_per_req"))
            failed = [run["failed"] for run in server_runs if run["failed"] is not None]
            summary["failed"] = sum(failed) if failed else None
            if not bad:
                summary["status"], summary["note"] = "ok", None
            else:
                summary["status"] = bad[0]["status"] if not ok else "partial"
                kinds = sorted({run["status"] for run in bad})
                notes = sorted({run["note"] for run in bad if run["note"]})
                summary["note"] = (f"{len(bad)} of {len(server_runs)} runs: {', '.join(kinds)}"
                                   + (f" ({'; '.join(notes)})" if notes else ""))
            table[server_name] = summary
        base = table.get(baseline) if baseline else None
        for summary in table.values():
            summary["ratio"] = {
                figure: (summary[figure] / base[figure]
                         if base and summary[figure] is not None and base[figure] else None)
                for figure in FIGURES}
        results[load_name] = table
    return results


# --- the whole run ------------------------------------------------------

def _progress(index: int, total: int, rep: int, repeat: int, record: dict, width: int) -> str:
    """``[ 7/66] rep 1/3 epoll ab-close ... 8123 req/s p99 3.1 ms cpu 95 µs/req``"""
    head = (f"[{index:>{len(str(total))}}/{total}] rep {rep}/{repeat} "
            f"{record['server']:<{width}} {record['load']:<12} ...")
    if record["status"] != "ok":
        return f"{head} {record['status'].upper()}: {record['note']}"
    parts = [f"{record['rps']:.0f} req/s" if record["rps"] is not None else "? req/s"]
    if record["p99_ms"] is not None:
        parts.append(f"p99 {record['p99_ms']:.1f} ms")
    if record["cpu_us_per_req"] is not None:
        parts.append(f"cpu {record['cpu_us_per_req']:.0f} µs/req")
    if record["failed"]:
        parts.append(f"{record['failed']} failed")
    return f"{head} {' '.join(parts)}"


@dataclass
class Plan:
    """What one invocation will measure, decided before anything starts."""

    loads: list[Load]
    candidates: list[Server]  # every server asked for, in table order
    skipped: dict[str, str]  # name -> why it cannot run here
    settings: Settings
    repeat: int
    warmup: int
    quick: bool

    @property
    def ready(self) -> list[Server]:
        return [server for server in self.candidates if server.name not in self.skipped]

    def runs(self) -> list[tuple[int, Load, Server]]:
        """``(rep, load, server)`` in the order they run: interleaved repetitions."""
        return [(rep, load, server) for rep in range(1, self.repeat + 1)
                for load in self.loads for server in self.ready]

    def estimate_seconds(self) -> float:
        """A rough wall-clock estimate, in seconds."""
        per_server = 0.0
        for load in self.loads:
            per_server += _ESTIMATE_OVERHEAD + self.warmup / _ESTIMATE_RPS["warm-up"]
            if load.tool == "ab":
                per_server += self.settings.requests[load.name] / _ESTIMATE_RPS[load.name]
            else:
                per_server += self.settings.duration + 0.3
        return per_server * len(self.ready) * self.repeat


def make_plan(args: argparse.Namespace) -> Plan:
    """Check the command line's names and numbers, and get every server ready (building peers)."""
    base = QUICK if args.quick else DEFAULTS
    every_stage = [stage.name for stage in stages.STAGES]
    every_load = [load.name for load in loads.LOADS]
    stage_names = choose_names(args.stages, every_stage, "stage", every_stage)
    peer_names = choose_names(args.peers, [peer.name for peer in servers.PEERS], "peer",
                        [peer.name for peer in servers.PEERS if peer.default])
    load_names = choose_names(args.loads, every_load, "load",
                        [load.name for load in loads.LOADS if load.default])

    def pick(given: float | None, key: str, flag: str, least: float) -> float:
        value = base[key] if given is None else given
        if value < least:
            raise SystemExit(f"run.py: {flag} must be at least {least:g}, got {value:g}")
        return value

    settings = Settings(
        requests=_requests(args.requests, {"ab-close": int(base["ab-close"]),
                                           "ab-keepalive": int(base["ab-keepalive"])}),
        duration=pick(args.duration, "duration", "--duration", 1),
        socket_timeout=pick(args.timeout, "socket_timeout", "--timeout", 0.1),
        run_timeout=pick(args.run_timeout, "run_timeout", "--run-timeout", 1),
    )
    candidates = ([servers.stage_server(stages.get(name)) for name in stage_names]
                  + [servers.peer_server(name) for name in peer_names])
    skipped = {}
    for server in candidates:
        note = servers.prepare(server)
        if note:
            skipped[server.name] = note
    return Plan([loads.get(name) for name in load_names], candidates, skipped, settings,
                int(pick(args.repeat, "repeat", "--repeat", 1)), int(pick(args.warmup, "warmup", "--warmup", 1)),
                args.quick)


def execute(plan: Plan, pinning: dict) -> list[dict]:
    """Run the plan, printing a progress line per run; return the run records."""
    order = plan.runs()
    width = max(len(server.name) for server in plan.ready)
    per_rep = len(order) // plan.repeat
    records: list[dict] = []
    rep_started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tinyloop-bench-") as workdir:
        for index, (rep, load, server) in enumerate(order, 1):
            record = {"rep": rep, **measure(server, load, plan.settings, pinning, Path(workdir), plan.warmup)}
            records.append(record)
            print(_progress(index, len(order), rep, plan.repeat, record, width), flush=True)
            if index % per_rep == 0 and rep < plan.repeat:
                took, rep_started = time.monotonic() - rep_started, time.monotonic()
                print(f"rep {rep}/{plan.repeat} took {minutes(took)}; "
                      f"about {minutes(took * (plan.repeat - rep))} to go", flush=True)
    return records


def results_json(plan: Plan, pinning: dict, records: list[dict], command: list[str],
                 date: datetime, elapsed: float) -> dict:
    """Everything the book and report.py read: the JSON's schema is in report.py's docstring."""
    baseline = servers.BASELINE if any(s.name == servers.BASELINE for s in plan.ready) else None
    settings = plan.settings
    return {
        "schema": SCHEMA,
        "date": date.isoformat(timespec="seconds"),
        "command": display(["python", "benchmarks/run.py", *command]),
        "machine": fingerprint(),
        "tools": servers.tool_versions(),
        "pinning": {key: value for key, value in pinning.items() if not key.endswith("_prefix")},
        "settings": {
            "quick": plan.quick, "repeat": plan.repeat, "requests": settings.requests,
            "warmup_requests": plan.warmup, "duration_s": settings.duration,
            "socket_timeout_s": settings.socket_timeout, "run_timeout_s": settings.run_timeout,
            "cpu_source": CPU_SOURCE,
            "order": "interleaved: each repetition runs every load on every server; "
                     "a fresh server process per run; figures are medians over repetitions",
        },
        "baseline": baseline,
        "loads": [{"name": load.name, "tool": load.tool, "title": load.title, "measures": load.measures,
                   "concurrency": load.concurrency, "keepalive": load.keepalive,
                   "requests": settings.requests.get(load.name) if load.tool == "ab" else None,
                   "duration_s": settings.duration if load.tool == "wrk" else None,
                   "command": display(loads.command(load, "http://127.0.0.1:PORT/", settings,
                                                     Path("PERCENTILES.csv") if load.tool == "ab" else None)),
                   # Only a pipelined load says so: the other loads' entries stay as they were.
                   **({"pipeline": load.pipeline} if load.pipeline > 1 else {})}
                  for load in plan.loads],
        "servers": [{"name": server.name, "kind": server.kind, "summary": server.summary,
                     "chapter": server.chapter, "command": display(server.argv),
                     "env": server.env or None, "skipped": plan.skipped.get(server.name)}
                    for server in plan.candidates],
        "runs": records,
        "results": summarize(records, baseline),
        "elapsed_s": round(elapsed, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.out = output.json_path(parser, args, f"{args.name}.json")
    plan = make_plan(args)
    if args.list:
        for server in plan.candidates:
            note = plan.skipped.get(server.name)
            print(f"{server.kind:<5}  {server.name:<16}  {'skipped: ' + note if note else 'ready'}")
        for load in loads.LOADS:
            state = "ready" if shutil.which(load.tool) else f"skipped: {load.tool} is not installed"
            print(f"load   {load.name:<16}  {state}  ({load.title})")
        return 0
    missing = sorted({load.tool for load in plan.loads if shutil.which(load.tool) is None})
    if missing:
        raise SystemExit(f"run.py: {' and '.join(missing)} not found; install ApacheBench (Debian: "
                         "apache2-utils) and wrk, or run `bash scripts/setup.sh`")
    for name, note in plan.skipped.items():
        print(f"skip {name}: {note}")
    if not plan.ready:
        raise SystemExit("run.py: no server can run here")

    pinning = choose_pinning(args.no_pin)
    where = (f"server on CPU {pinning['server_cpus']}, load generator on CPU {pinning['load_cpus']}"
             if pinning["enabled"] else f"unpinned ({pinning['reason']})")
    print(f"{len(plan.ready)} servers x {len(plan.loads)} loads x {plan.repeat} repetitions = "
          f"{len(plan.runs())} runs; {where}; estimate about {minutes(plan.estimate_seconds())}", flush=True)

    date, started = datetime.now(timezone.utc), time.monotonic()
    records = execute(plan, pinning)
    data = results_json(plan, pinning, records, sys.argv[1:] if argv is None else argv,
                        date, time.monotonic() - started)
    out = write_json(data, args.out, keep_copy=True)
    print()
    print(report.format_text(data))
    print(f"\nwrote {relative(out)} in {minutes(data['elapsed_s'])}")
    if out.resolve() == REFERENCE.resolve():
        print("this is the book's reference run now: commit it with its plot, "
              "git add benchmarks/results/latest.json benchmarks/results/latest.png")
    else:
        print(f"the book shows the reference run (benchmarks/results/latest.json); to see yours "
              f"in it, build with -D book_bench_results={relative(out)}")
    if not args.no_plot:
        png = args.plot or args.out.with_suffix(".png")
        try:
            report.plot(data, None, png)
            print(f"drew {relative(png)}")
        except ImportError:
            print("note: matplotlib is not installed, so no plot (pip install matplotlib)")
    print(conclusion(data))
    if args.syscalls:
        # A pass of its own, after the timed one: strace slows a server down.
        from benchmarks import syscalls
        print(flush=True)
        where = ["--reference"] if args.reference else ["--out", str(args.out.parent / "syscalls.json")]
        chosen = []
        for flag, value in (("--stages", args.stages), ("--peers", args.peers)):
            if value is not None:
                chosen += [flag, value]
        return syscalls.main([*chosen, *where, *(["--quick"] if args.quick else []),
                              *(["--no-pin"] if args.no_pin else [])])
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: under wrk (else the first load), the stage with the least server CPU
    per request, against the baseline's."""
    results = data["results"].get("wrk") or next(iter(data["results"].values()), {})
    load = "wrk" if "wrk" in data["results"] else next(iter(data["results"]), "?")
    kinds = {server["name"]: server["kind"] for server in data["servers"]}
    measured = {name: row["cpu_us_per_req"] for name, row in results.items()
                if row.get("cpu_us_per_req") is not None}
    stages_measured = [name for name in measured if kinds.get(name) == "stage"]
    if not stages_measured:
        return f"{load}: no stage measured"
    best = min(stages_measured, key=measured.get)
    base = data.get("baseline")
    against = f", {base} {measured[base]:.0f}" if base in measured else ""
    return f"{load}: server CPU per request, least among the stages: {best} {measured[best]:.0f} µs{against}"


if __name__ == "__main__":
    raise SystemExit(main())
