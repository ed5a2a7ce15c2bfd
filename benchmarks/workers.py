# benchmarks/workers.py
"""One server on 1 and on 2 worker processes (``serve STAGE --workers N``), under wrk.

    python -m benchmarks.workers              aio, epoll and uvloop-protocol, three layouts each,
                                              3 interleaved repetitions of 5 s (about 3 minutes)
    python -m benchmarks.workers --quick      a smoke run: 1 repetition of 1 s (about 20 seconds)

The layouts and the columns: chapters/realworld/workers.md.  The server's CPU
seconds count the supervisor and every worker; wrk's come from getrusage of
the reaped child.  No raised priority: under SCHED_FIFO two workers on one
core took turns by whole batches (p99 about 1 s), so run it on a quiet machine.
(``--serve NAME --workers N --port P`` starts the uvloop peer on N workers.)
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import signal
import socket
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from benchmarks import loads, servers
from benchmarks.harness import experiment, output
from benchmarks.harness.layout import cpu_list, taskset, usable_cpus
from benchmarks.harness.machine import display
from benchmarks.harness.process import choose_pinning, warm_up
from benchmarks.harness.render import machine_line
from benchmarks.harness.render import markdown as table
from benchmarks.loads import Settings
from benchmarks.realworld.services import process_tree_cpu
from benchmarks.servers import Server
from tinyloop import stages, workers

SERVERS = ("epoll", "aio", "uvloop-protocol")
DEFAULTS = {"duration": 5.0, "repeat": 3, "warmup": 1000}
QUICK = {"duration": 1.0, "repeat": 1, "warmup": 50}
SOCKET_TIMEOUT = 5.0
WRK = loads.get("wrk")  # wrk -t1 -c 100 --latency, keep-alive
FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "server_cores_busy", "wrk_core_busy", "busiest_worker_share")

_LISTENING = re.compile(r"worker \d+ of \d+ listening \(pid (\d+)\)")


class Layout(NamedTuple):
    """Where one run's processes may run: ``workers`` server processes on
    ``server_cpus``, wrk on ``load_cpu``; ``shared`` when wrk's CPU is one of the server's."""

    workers: int
    server_cpus: tuple[int, ...]
    load_cpu: int | None

    @property
    def shared(self) -> bool:
        return self.load_cpu in self.server_cpus


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
        raise SystemExit(f"benchmarks.workers: only stages and uvloop-protocol run on several workers, not {name!r}")
    return replace(server, argv=(sys.executable, "-m", "benchmarks.workers", "--serve", name,
                                 "--workers", str(count), "--port", "0"))


def serve_uvloop(listener: socket.socket) -> None:
    """One worker of the uvloop-protocol peer: the aio stage's Protocol on uvloop, until SIGTERM,
    which (as tinyloop.aio.server.run_stage does) cancels the main task between callbacks."""
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
                    "load_cpu": layout.load_cpu, "status": "error", "note": None,
                    "layout": f"{layout.workers} on {list(layout.server_cpus)}, wrk on {layout.load_cpu}",
                    **dict.fromkeys(("completed", "failed", "seconds", "server_cpu_s", "worker_cpu_s",
                                     "wrk_cpu_s", *FIGURES))}
    try:
        process = servers.launch(server, taskset(cpu_list(layout.server_cpus)))
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
        pids = [int(match[1]) for line in process.stderr_lines if (match := _LISTENING.search(line))]
        before, before_workers = process_tree_cpu(process.pid), [process_tree_cpu(pid) for pid in pids]
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_prefix = taskset(None if layout.load_cpu is None else str(layout.load_cpu))
        result, _, _ = loads.run(WRK, f"http://{process.host}:{process.port}/", settings, workdir, load_prefix)
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        after, after_workers = process_tree_cpu(process.pid), [process_tree_cpu(pid) for pid in pids]
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms, completed=result.completed,
                      failed=result.failed, seconds=result.seconds, server_cpu_s=round(after - before, 3),
                      worker_cpu_s=[round(a - b, 3) for a, b in zip(after_workers, before_workers)] or None)
        # wrk is the only child reaped while it ran (servers are reaped when stopped).
        record["wrk_cpu_s"] = round((children_after.ru_utime + children_after.ru_stime)
                                    - (children_before.ru_utime + children_before.ru_stime), 3)
        if process.proc is not None and process.proc.poll() is not None:
            record["note"] = f"the server exited with code {process.proc.returncode} during the run"
        elif result.timed_out or not result.completed:
            record["status"], record["note"] = "timeout", result.error or "no response"
        else:
            record["status"], record["note"] = "ok", result.error
        return {**record, **_figures(record)}
    finally:
        process.stop()


def _figures(record: dict) -> dict:
    """The figures a row takes the median of: CPU per request, each side's busy cores, and the
    busiest worker's share of the workers' CPU time (None where a run cannot say)."""
    cpu, seconds, completed, shares = (record["server_cpu_s"], record["seconds"], record["completed"],
                                       record["worker_cpu_s"])
    timed = cpu is not None and bool(seconds) and bool(completed)
    return {"cpu_us_per_req": cpu * 1e6 / completed if timed else None,
            "server_cores_busy": cpu / seconds if timed else None,
            "wrk_core_busy": record["wrk_cpu_s"] / seconds if record["wrk_cpu_s"] is not None and seconds else None,
            "busiest_worker_share": max(shares) / sum(shares) if shares and len(shares) > 1 and sum(shares) else None}


def summarize(records: list[dict]) -> list[dict]:
    """One row per (server, layout), in run order: the harness's fold of its runs (medians of the ok
    ones), and req/s against the same server's 1-worker row."""
    base = next((run["layout"] for run in records if run["workers"] == 1), None)
    folded = experiment.fold(records, "server", "layout", FIGURES, deciding=("rps",), baseline=base, ratios=("rps",))
    rows = {}
    for run in records:
        summary = folded[run["server"]][run["layout"]]
        rows.setdefault((run["server"], run["layout"]), {
            "server": run["server"], "workers": run["workers"], "server_cpus": run["server_cpus"],
            "load_cpu": run["load_cpu"], "shared": run["load_cpu"] is not None and run["load_cpu"] in run["server_cpus"],
            **{key: value for key, value in summary.items() if key != "ratio"}, "rps_ratio": summary["ratio"]["rps"]})
    return list(rows.values())


def _cell(value: float | None, digits: int = 0, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def markdown(data: dict) -> str:
    """The table the book includes: one row per server and layout, then what the columns mean."""
    settings = data["settings"]
    how = (f"median of {settings['repeat']}" if settings["repeat"] > 1 else "1 run")
    if settings["quick"]:
        how += " (`--quick`: a smoke run, not a measurement)"
    rows = []
    for row in data["rows"]:
        load_cpu = ("any" if row["load_cpu"] is None else str(row["load_cpu"])) + (" (shared)" if row["shared"] else "")
        share = row["busiest_worker_share"]
        cells = ([row["status"]] + ["–"] * 7 if row["status"] not in ("ok", "partial") else
                 [_cell(row["rps"]), _cell(row["rps_ratio"], 2, "×"), _cell(row["p50_ms"], 2),
                  _cell(row["p99_ms"], 2), _cell(row["cpu_us_per_req"]), _cell(row["server_cores_busy"], 2),
                  _cell(row["wrk_core_busy"], 2), _cell(None if share is None else share * 100, 0, "%")])
        rows.append([row["server"], str(row["workers"]), ",".join(map(str, row["server_cpus"])) or "any",
                     load_cpu, *cells])
    header = ["server", "workers", "server CPUs", "wrk CPU", "req/s", "× 1 worker", "p50 ms", "p99 ms",
              "server CPU µs/req", "server cores busy", "wrk core busy", "busiest worker"]
    return "\n".join([
        f"`{data['command']}`: {machine_line(data)}; `{data['load']['command']}`, {how}; {data['date'][:10]}.", "",
        *table(header, rows), "",
        "*server cores busy*: the CPU seconds of the supervisor and all its workers over the run's length "
        "(1.00 is one core, all the time); *wrk core busy*: the same for wrk; *busiest worker*: the share "
        "of the workers' CPU time the busiest one used (50% is an even split of two). "
        "*(shared)*: wrk runs on a CPU the workers may use too, so wrk and a worker take turns on it."]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: each server's 2 workers on 2 cores against its 1 worker, in req/s."""
    parts = [f"{row['server']} {row['rps_ratio']:.2f}×" for row in data["rows"]
             if row["workers"] == 2 and len(row["server_cpus"]) != 1 and row["rps_ratio"] is not None]
    return experiment.sentence("2 workers on 2 cores, req/s against 1 worker", parts,
                               "2 workers on 2 cores: no row measured")


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("workers", __doc__, repeat=DEFAULTS["repeat"])
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help=f"comma list of stages, or uvloop-protocol (default {','.join(SERVERS)})")
    parser.add_argument("--duration", type=float, help=f"wrk's -d in seconds (default {DEFAULTS['duration']:g})")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:  # the uvloop peer on several workers (see server_for)
        return workers.supervise(args.serve, serve_uvloop, "127.0.0.1", args.port, args.workers)
    out = output.json_path(parser, args, "workers.json")
    if missing := workers.reuse_port_missing():
        raise SystemExit(f"benchmarks.workers: {missing}")
    experiment.require("workers", "wrk")
    pick = experiment.settings(parser, args, DEFAULTS, QUICK)
    settings = Settings(requests={}, duration=pick["duration"], socket_timeout=SOCKET_TIMEOUT, run_timeout=60.0)
    cpus = usable_cpus()
    pin = choose_pinning(args.no_pin)["enabled"]  # (it moves this process beside wrk; no real-time priority)
    plan = layouts(cpus, pin)
    if plan[-1].shared:
        print(f"note: {len(cpus)} CPUs: with 2 workers on CPUs {cpus[0]},{cpus[1]} wrk shares CPU "
              f"{plan[-1].load_cpu} with one of them", flush=True)
    chosen, _ = experiment.prepared([name for name in args.servers.split(",") if name],
                                    lambda name: servers.prepare(server_for(name, 1)))
    cells = [(name, layout) for name in chosen for layout in plan]
    print(f"{len(cells)} cells x {pick['repeat']} repetitions of {settings.duration:g} s; "
          f"about {len(cells) * pick['repeat'] * (settings.duration + 1.5) / 60:.1f} min", flush=True)
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-workers-") as workdir:
        records = experiment.interleave(
            cells, pick["repeat"], lambda cell: measure(server_for(cell[0], cell[1].workers), cell[1], settings,
                                                        pick["warmup"], Path(workdir)),
            lambda cell: f"{cell[0]} {cell[1].workers} on CPUs {cpu_list(cell[1].server_cpus) or 'any'}",
            lambda r: f"{r['rps']:.0f} req/s, server {r['server_cpu_s']} s CPU, wrk {r['wrk_cpu_s']} s")
    data = experiment.document(
        "workers", argv, clock,
        settings={"quick": args.quick, "repeat": pick["repeat"], "duration_s": settings.duration,
                  "warmup_requests": pick["warmup"], "pinned": pin,
                  "cpu_source": "the CPU-time clock of the supervisor and each worker, + the children they "
                                "reaped (process_tree_cpu); wrk: getrusage(RUSAGE_CHILDREN) around its run"},
        tools={key: value for key, value in servers.tool_versions().items() if key in ("wrk", "taskset", "uvloop")},
        load={"name": WRK.name, "title": WRK.title,
              "command": display(loads.command(WRK, "http://127.0.0.1:PORT/", settings))},
        servers={name: {"workers_1": display(server_for(name, 1).argv),
                        "workers_2": display(server_for(name, 2).argv)} for name in chosen},
        runs=records, rows=summarize(records))
    return experiment.conclude(data, out, clock, markdown, conclusion, ".md")


if __name__ == "__main__":
    raise SystemExit(main())
