# benchmarks/workers.py
"""One server on 1 and on 2 worker processes (``serve STAGE --workers N``), under wrk.

    python benchmarks/workers.py            the reference run: aio, epoll and uvloop-protocol, three
                                            layouts each, 3 interleaved repetitions of 5 s (about 3 minutes)
    python benchmarks/workers.py --quick    a smoke run: 1 repetition of 1 s (about 20 seconds)
    python benchmarks/workers.py --table    write the Markdown table again from the JSON

Writes benchmarks/results/local/workers.json and its Markdown table beside it
(ignored by git); ``--reference`` writes the book's committed
benchmarks/results/workers.json and workers.md instead.  (``--serve NAME --workers N --port P`` is
how the harness starts the uvloop peer on N workers; not for people.)
"""

# Rules this file keeps:
#
#   * Every core is accounted for.  Each row says which CPUs the server's
#     processes may run on and which one wrk runs on (taskset), and reports
#     how busy each side was: server CPU seconds (the supervisor and every
#     worker, from /proc) and wrk's own CPU seconds (getrusage of the reaped
#     child), both divided by the run's length.  On a 2-core machine, two
#     workers on two cores share one of them with wrk: the table says so in
#     its "shared" column instead of hiding it.
#   * Three layouts per server, so the effect of processes and the effect of
#     cores can be told apart: 1 worker on 1 core (run.py's layout), 2
#     workers on that same core (more processes, no more CPU: the control),
#     2 workers on 2 cores.  With 3 or more CPUs wrk gets a core of its own.
#   * The rest is benchmarks/run.py's way: a fresh server per run, warmed up
#     first, repetitions interleaved, medians; the wrk command and its parser
#     are benchmarks/loads.py's.

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import loads, servers
from benchmarks.harness import output
from benchmarks.harness.machine import display, fingerprint
from benchmarks.harness.process import warm_up
from benchmarks.harness.summary import median
from benchmarks.loads import Settings
from benchmarks.realworld.services import process_tree_cpu
from benchmarks.servers import Server
from tinyloop import stages, workers

SCHEMA = 1

SERVERS = ("epoll", "aio", "uvloop-protocol")
DEFAULTS = {"duration": 5.0, "repeat": 3, "warmup": 1000}
QUICK = {"duration": 1.0, "repeat": 1, "warmup": 50}
SOCKET_TIMEOUT = 5.0
WRK = loads.get("wrk")  # wrk -t1 -c 100 --latency, keep-alive

_LISTENING = re.compile(r"worker \d+ of \d+ listening \(pid (\d+)\)")


@dataclass(frozen=True)
class Layout:
    """Where one run's processes may run: ``workers`` server processes on
    ``server_cpus``, wrk on ``load_cpu``; ``shared`` when wrk's CPU is one of the server's."""

    workers: int
    server_cpus: tuple[int, ...]
    load_cpu: int | None

    @property
    def shared(self) -> bool:
        return self.load_cpu in self.server_cpus

    @property
    def label(self) -> str:
        cores = len(self.server_cpus) if self.server_cpus else "any"
        return f"{self.workers} worker{'s' if self.workers > 1 else ''}, {cores} core{'s' if cores != 1 else ''}"


def layouts(cpus: list[int], pin: bool) -> list[Layout]:
    """The three layouts on this machine's usable ``cpus`` (unpinned: no CPU lists at all)."""
    if not pin or len(cpus) < 2:
        return [Layout(1, (), None), Layout(2, (), None)]
    first, second = cpus[0], cpus[1]
    load_cpu = cpus[2] if len(cpus) >= 3 else cpus[1]  # on 2 cores wrk shares the second
    return [Layout(1, (first,), cpus[1]), Layout(2, (first,), cpus[1]), Layout(2, (first, second), load_cpu)]


def server_for(name: str, count: int) -> Server:
    """``name`` (a stage, or the uvloop-protocol peer) on ``count`` worker processes."""
    if name in (stage.name for stage in stages.STAGES):
        server = servers.stage_server(stages.get(name))
        return replace(server, argv=(*server.argv, "--workers", str(count))) if count > 1 else server
    server = servers.peer_server(name)
    if count == 1:
        return server
    if name != "uvloop-protocol":
        raise SystemExit(f"workers.py: only stages and uvloop-protocol run on several workers, not {name!r}")
    return replace(server, argv=(sys.executable, "-m", "benchmarks.workers", "--serve", name,
                                 "--workers", str(count), "--port", "0"))


def serve_uvloop(listener: socket.socket) -> None:
    """One worker of the uvloop-protocol peer: the aio stage's Protocol on uvloop, until SIGTERM.

    As tinyloop.aio.server.run_stage does on our loop, SIGTERM goes through
    the loop (add_signal_handler) and cancels the main task between callbacks.
    """
    import uvloop

    from tinyloop.aio.server import serve_on

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
        await serve_on(listener, "protocol")

    try:
        uvloop.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt("SIGTERM") from None


def measure(server: Server, layout: Layout, settings: Settings, warmup: int, workdir: Path) -> dict:
    """Start ``server`` in ``layout``, warm every worker, run wrk once, stop it; return the run's record."""
    record: dict = {"server": server.name, "workers": layout.workers, "server_cpus": list(layout.server_cpus),
                    "load_cpu": layout.load_cpu, "status": "error", "note": None, "rps": None, "p50_ms": None,
                    "p99_ms": None, "completed": None, "failed": None, "seconds": None, "server_cpu_s": None,
                    "worker_cpu_s": None, "wrk_cpu_s": None}
    server_prefix = ["taskset", "-c", ",".join(map(str, layout.server_cpus))] if layout.server_cpus else []
    load_prefix = ["taskset", "-c", str(layout.load_cpu)] if layout.load_cpu is not None else []
    try:
        process = servers.launch(server, server_prefix)
    except RuntimeError as error:
        record["note"] = "did not start: " + " | ".join(str(error).strip().splitlines()[:3])
        return record
    try:
        # A keep-alive connection stays with one worker: warm them all with a
        # few connections, each hashed to a worker of the kernel's choosing.
        connections = 4 * layout.workers
        for _ in range(connections):
            failure = warm_up(process.address, max(warmup // connections, 1), SOCKET_TIMEOUT)
            if failure is not None:
                record["status"], record["note"] = failure
                return record
        pids = [int(match.group(1)) for line in process.stderr_lines for match in [_LISTENING.search(line)] if match]
        before, before_workers = process_tree_cpu(process.pid), [process_tree_cpu(pid) for pid in pids]
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result, _, output = loads.run(WRK, f"http://{process.host}:{process.port}/", settings, workdir,
                                      load_prefix)
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        after, after_workers = process_tree_cpu(process.pid), [process_tree_cpu(pid) for pid in pids]
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms, completed=result.completed,
                      failed=result.failed, seconds=result.seconds)
        record["server_cpu_s"] = round(after - before, 3)
        record["worker_cpu_s"] = [round(a - b, 3) for a, b in zip(after_workers, before_workers)] or None
        # wrk is the only child reaped while it ran (servers are reaped when stopped).
        record["wrk_cpu_s"] = round((children_after.ru_utime + children_after.ru_stime)
                                    - (children_before.ru_utime + children_before.ru_stime), 3)
        if process.proc is not None and process.proc.poll() is not None:
            record["note"] = f"the server exited with code {process.proc.returncode} during the run"
        elif result.timed_out or not result.completed:
            record["status"], record["note"] = "timeout", result.error or "no response"
        else:
            record["status"], record["note"] = "ok", result.error
        if result.completed is None and record["status"] == "error":
            record["note"] = record["note"] or (output.strip().splitlines()[-1:] or ["no output"])[0]
        return record
    finally:
        process.stop()


def summarize(records: list[dict]) -> list[dict]:
    """One row per (server, layout): medians over the runs that were ok, and each side's busy cores."""
    rows: dict[tuple, dict] = {}
    for record in records:
        key = (record["server"], record["workers"], tuple(record["server_cpus"]), record["load_cpu"])
        rows.setdefault(key, {"runs": []})["runs"].append(record)
    out = []
    for (name, count, server_cpus, load_cpu), row in rows.items():
        ok = [r for r in row["runs"] if r["status"] == "ok"]
        summary = {"server": name, "workers": count, "server_cpus": list(server_cpus), "load_cpu": load_cpu,
                   "shared": load_cpu is not None and load_cpu in server_cpus,
                   "runs": len(row["runs"]), "ok_runs": len(ok),
                   "status": "ok" if len(ok) == len(row["runs"]) else ("partial" if ok else row["runs"][0]["status"]),
                   "note": "; ".join(sorted({r["note"] for r in row["runs"] if r["status"] != "ok" and r["note"]}))
                   or None}
        for figure in ("rps", "p50_ms", "p99_ms"):
            summary[figure] = median([r[figure] for r in ok])
        summary["cpu_us_per_req"] = median([r["server_cpu_s"] * 1e6 / r["completed"] for r in ok
                                             if r["server_cpu_s"] is not None and r["completed"]])
        summary["server_cores_busy"] = median([r["server_cpu_s"] / r["seconds"] for r in ok
                                                if r["server_cpu_s"] is not None and r["seconds"]])
        summary["wrk_core_busy"] = median([r["wrk_cpu_s"] / r["seconds"] for r in ok
                                            if r["wrk_cpu_s"] is not None and r["seconds"]])
        shares = [[cpu / sum(r["worker_cpu_s"]) for cpu in r["worker_cpu_s"]] for r in ok
                  if r["worker_cpu_s"] and sum(r["worker_cpu_s"]) > 0 and len(r["worker_cpu_s"]) > 1]
        summary["busiest_worker_share"] = median([max(share) for share in shares])
        out.append(summary)
    for summary in out:  # each server's 1-worker row is what its other rows are divided by
        base = next((s for s in out if s["server"] == summary["server"] and s["workers"] == 1), None)
        summary["rps_ratio"] = (summary["rps"] / base["rps"]
                                if base and base["rps"] and summary["rps"] is not None else None)
    return out


def _cell(value: float | None, digits: int = 0, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def markdown(data: dict) -> str:
    """The table the book includes: one row per server and layout, then what the columns mean."""
    machine, settings = data["machine"], data["settings"]
    how = (f"median of {settings['repeat']}" if settings["repeat"] > 1 else "1 run")
    if settings["quick"]:
        how += " (`--quick`: a smoke run, not a measurement)"
    lines = [
        f"`{data['command']}`: {machine['cpu_model']}, {machine['cpus']} CPUs, {machine['system']} "
        f"{machine['kernel']}, {machine['python']}; `{data['load']['command']}`, {how}; {data['date'][:10]}.",
        "",
        "| server | workers | server CPUs | wrk CPU | req/s | × 1 worker | p50 ms | p99 ms "
        "| server CPU µs/req | server cores busy | wrk core busy | busiest worker |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        cpus = ",".join(map(str, row["server_cpus"])) or "any"
        load_cpu = "any" if row["load_cpu"] is None else str(row["load_cpu"])
        if row["shared"]:
            load_cpu += " (shared)"
        if row["status"] not in ("ok", "partial"):
            cells = [row["status"]] + ["–"] * 7
        else:
            cells = [_cell(row["rps"]), _cell(row["rps_ratio"], 2, "×"), _cell(row["p50_ms"], 2),
                     _cell(row["p99_ms"], 2), _cell(row["cpu_us_per_req"]), _cell(row["server_cores_busy"], 2),
                     _cell(row["wrk_core_busy"], 2),
                     _cell(None if row["busiest_worker_share"] is None else row["busiest_worker_share"] * 100,
                           0, "%")]
        lines.append(f"| {row['server']} | {row['workers']} | {cpus} | {load_cpu} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "*server cores busy*: the CPU seconds of the supervisor and all its workers over the run's length "
        "(1.00 is one core, all the time); *wrk core busy*: the same for wrk; *busiest worker*: the share "
        "of the workers' CPU time the busiest one used (50% is an even split of two). "
        "*(shared)*: wrk runs on a CPU the workers may use too, so wrk and a worker take turns on it.",
    ]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/workers.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 repetition of 1 s: a smoke run")
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help=f"comma list of stages, or uvloop-protocol (default {','.join(SERVERS)})")
    parser.add_argument("--repeat", type=int, help=f"repetitions, interleaved (default {DEFAULTS['repeat']})")
    parser.add_argument("--duration", type=float, help=f"wrk's -d in seconds (default {DEFAULTS['duration']:g})")
    parser.add_argument("--no-pin", action="store_true", help="run unpinned (no taskset)")
    output.add_arguments(parser, "workers.json")
    parser.add_argument("--table", action="store_true",
                        help="only write the Markdown table again from the JSON (--out's, or with --reference the book's)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.serve:  # the uvloop peer on several workers (see server_for)
        return workers.supervise(args.serve, serve_uvloop, "127.0.0.1", args.port, args.workers)
    if args.table and args.reference:
        args.out, args.reference = output.RESULTS / "workers.json", False  # rewrite the book's table from its JSON
    args.out = output.json_path(parser, args, "workers.json")
    table_out = args.out.with_suffix(".md")
    if args.table:
        table_out.write_text(markdown(json.loads(args.out.read_text(encoding="utf-8"))), encoding="utf-8")
        print(f"wrote {table_out}")
        return 0
    missing = workers.reuse_port_missing()
    if missing:
        raise SystemExit(f"workers.py: {missing}")
    if shutil.which("wrk") is None:
        raise SystemExit("workers.py: wrk not found; install it (Debian: apt-get install wrk) "
                         "or run `bash scripts/setup.sh`")
    base = QUICK if args.quick else DEFAULTS
    repeat = args.repeat or int(base["repeat"])
    settings = Settings(requests={}, duration=args.duration or base["duration"], socket_timeout=SOCKET_TIMEOUT,
                        run_timeout=60.0)
    names = [name.strip() for name in args.servers.split(",") if name.strip()]
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and shutil.which("taskset") is not None and len(cpus) >= 2
    plan = layouts(cpus, pin)
    if pin:
        os.sched_setaffinity(0, {plan[-1].load_cpu})  # the harness mostly waits: keep it beside wrk
    chosen = []
    for name in names:
        note = servers.prepare(server_for(name, 1))
        if note:
            print(f"skip {name}: {note}")
        else:
            chosen.append(name)
    order = [(rep, name, layout) for rep in range(1, repeat + 1) for name in chosen for layout in plan]
    estimate = len(order) * (settings.duration + 1.5)
    print(f"{len(chosen)} servers x {len(plan)} layouts x {repeat} repetitions = {len(order)} runs of "
          f"{settings.duration:g} s; about {estimate / 60:.1f} min", flush=True)
    if pin and plan[-1].shared:
        print(f"note: {len(cpus)} CPUs: with 2 workers on CPUs {cpus[0]},{cpus[1]} wrk shares CPU "
              f"{plan[-1].load_cpu} with one of them", flush=True)
    date, started = datetime.now(timezone.utc), time.monotonic()
    records = []
    with tempfile.TemporaryDirectory(prefix="tinyloop-workers-") as workdir:
        for index, (rep, name, layout) in enumerate(order, 1):
            record = {"rep": rep, **measure(server_for(name, layout.workers), layout, settings,
                                            int(base["warmup"]), Path(workdir))}
            records.append(record)
            figures = (f"{record['rps']:.0f} req/s, server {record['server_cpu_s']} s CPU, wrk {record['wrk_cpu_s']} s"
                       if record["status"] == "ok" else f"{record['status']}: {record['note']}")
            print(f"[{index}/{len(order)}] rep {rep} {name} {layout.label} ... {figures}", flush=True)
    data = {
        "schema": SCHEMA,
        "date": date.isoformat(timespec="seconds"),
        "command": "python benchmarks/workers.py" + ("".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))),
        "machine": fingerprint(),
        "tools": {key: value for key, value in servers.tool_versions().items() if key in ("wrk", "taskset", "uvloop")},
        "settings": {"quick": args.quick, "repeat": repeat, "duration_s": settings.duration,
                     "warmup_requests": int(base["warmup"]), "pinned": pin,
                     "cpu_source": "/proc/PID/stat utime+stime (+ reaped children) of the supervisor and its "
                                   "workers; wrk: getrusage(RUSAGE_CHILDREN) around its run"},
        "load": {"name": WRK.name, "title": WRK.title,
                 "command": display(loads.command(WRK, "http://127.0.0.1:PORT/", settings))},
        "servers": {name: {"workers_1": display(server_for(name, 1).argv),
                           "workers_2": display(server_for(name, 2).argv)} for name in chosen},
        "runs": records,
        "rows": summarize(records),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    output.write_json(data, args.out)
    output.write_text(markdown(data), table_out)
    print()
    print(markdown(data))
    print(f"wrote {output.relative(args.out)} and {output.relative(table_out)} in {data['elapsed_s']:.0f} s")
    print(conclusion(data["rows"]))
    return 0


def conclusion(rows: list[dict]) -> str:
    """The run in one line: each server's 2 workers on 2 cores against its 1 worker, in req/s."""
    parts = [f"{row['server']} {row['rps_ratio']:.2f}×" for row in rows
             if row["workers"] == 2 and len(row["server_cpus"]) != 1 and row["rps_ratio"] is not None]
    return ("2 workers on 2 cores, req/s against 1 worker: " + ", ".join(parts)) if parts else \
        "2 workers on 2 cores: no row measured"


if __name__ == "__main__":
    raise SystemExit(main())
