"""Part VI's reference: what the io_uring servers save, in one sitting.

    python -m benchmarks.completion               writes benchmarks/results/local/completion.*
    python -m benchmarks.completion --quick       a smoke run (seconds, not a measurement)
    python -m benchmarks.completion --reference   the completion chapter's figure and tables

Three measurements of the uring and uring-multishot stages, with the epoll
stage beside them where the comparison means something:

  batches    each server in a process of its own (``--serve STAGE``) on a
             RecordingRing, a Ring whose ``submit_and_wait`` also notes, per
             call, its time, the SQEs it submitted and the CQEs waiting after
             it; the load from this process (tinyloop.testing.Crowd): CLIENTS
             keep-alive connections, one ``GET /`` each per round, ROUNDS
             rounds after a warm-up round.  -> completion_batches.md, .svg
  syscalls   benchmarks.syscalls' count (strace -c over wrk, depth 1 and 24)
             for epoll, uring and uring-multishot, and the C floors c-epoll
             and c-uring (benchmarks/peers/c).  -> completion_syscalls.md
  memory     benchmarks.memory's RSS with 0, 1,000 and 10,000 idle keep-alive
             connections, and the slope: bytes per connection (the same rows).
             -> completion_memory.md
  sqpoll     the C floor on io_uring with and without an SQ poll thread
             (TINYLOOP_SQPOLL, IORING_SETUP_SQPOLL): the server pinned to one
             CPU and wrk to the other, at depth 1 and 24, the server's CPU
             time per request (its process clock, the poll thread included:
             the thread's own times from /proc/PID/task are kept beside it),
             requests/s, where each thread ran, and, in the syscalls rows,
             its system calls per request.  The decision: SQPOLL is used only
             if it lowers CPU per request at both depths.  -> completion_sqpoll.md
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import loads, memory, servers, syscalls
from benchmarks.harness import experiment, output
from benchmarks.harness.machine import display, version_line
from benchmarks.harness.process import CPU_SOURCE, choose_pinning, cpu_seconds, raise_nofile
from benchmarks.harness.strace import strace_problem
from benchmarks.loads import Settings
from tinyloop import stages
from tinyloop import serving
from tinyloop.http import HELLO
from tinyloop.raw import uring
from tinyloop.raw.uring_multishot_server import MultishotServer
from tinyloop.raw.uring_server import UringServer
from tinyloop.testing import Crowd, ServerProcess

__all__ = ["RecordingRing", "main", "render_batches"]

STAGES = {"uring": UringServer, "uring-multishot": MultishotServer}
# The syscalls and memory rows: the stages, then the C floors on epoll and on io_uring (what the
# system calls alone cost, with no interpreter).
COMPARED = ["epoll", "uring", "uring-multishot", "c-epoll", "c-uring"]
CLIENTS = 10
ROUNDS = 20
# The SQ poll thread sleeps after this many milliseconds without work (sq_thread_idle); under a
# steady load it never does.
SQPOLL_IDLE_MS = 100


class RecordingRing(uring.Ring):
    """A Ring that notes each io_uring_enter: (CLOCK_MONOTONIC seconds, SQEs submitted, CQEs waiting).

    CLOCK_MONOTONIC is one clock for every process, so the load's round
    boundaries, taken in another process, cut the same record.
    """

    def __init__(self, entries: int = 256) -> None:
        super().__init__(entries)
        self.calls: list[tuple[float, int, int]] = []

    def submit_and_wait(self, wait_nr: int = 1) -> int:
        taken = super().submit_and_wait(wait_nr)
        tail, head = (uring._U32.unpack_from(self._cq, at)[0] for at in (self._cq_tail_at, self._cq_head_at))
        self.calls.append((time.monotonic(), taken, (tail - head) & 0xFFFFFFFF))
        return taken


def serve(stage: str, record: Path) -> None:
    """The server side: STAGE's server on a RecordingRing until SIGTERM; its calls go to ``record``."""
    listener = serving.listen("127.0.0.1", 0)
    serving.stop_on_sigterm()
    serving.announce(stage, listener)
    ring = RecordingRing()
    driver = STAGES[stage](listener, ring)
    try:
        driver.serve()
    except KeyboardInterrupt:
        pass
    finally:
        ring.close()
        driver.release()
        record.write_text(json.dumps(ring.calls))
        listener.close()


def measure(stage: str, workdir: Path, clients: int, rounds: int) -> dict:
    """One stage under the load: the enters during the counted rounds, and totals per request."""
    record = workdir / f"{stage}.json"
    marks = workdir / f"{stage}.marks"
    command = [sys.executable, "-m", "benchmarks.completion", "--serve", stage, "--record", str(record)]
    with ServerProcess(stage, command=command) as server, Crowd(server.address, timeout=30.0) as crowd:
        crowd.open(clients)
        times = []
        for _ in range(rounds + 1):           # round 0 warms up
            times.append(time.monotonic())
            if wrong := sum(answer != (200, HELLO) for answer in crowd.ask()):
                raise RuntimeError(f"{stage}: {wrong} of {clients} requests were not answered")
        times.append(time.monotonic())
    marks.write_text(json.dumps(times))
    calls = [c for c in json.loads(record.read_text()) if times[1] <= c[0] < times[-1]]
    requests = clients * rounds
    return {"calls": [[round(t - times[1], 6), sqes, cqes] for t, sqes, cqes in calls],
            "requests": requests, "enters_per_request": round(len(calls) / requests, 3),
            "sqes_per_request": round(sum(c[1] for c in calls) / requests, 3),
            "cqes_per_request": round(sum(c[2] for c in calls) / requests, 3),
            "most_cqes_per_enter": max((c[2] for c in calls), default=0)}


def render_batches(data: dict) -> str:
    """completion_batches.md, from the JSON alone."""
    lines = ["| stage | requests | io_uring_enter per request | SQEs per request | CQEs per request "
             "| most CQEs in one enter |", "|---|---:|---:|---:|---:|---:|"]
    for stage, row in data["batches"].items():
        lines.append(f"| `{stage}` | {row['requests']} | {row['enters_per_request']:.2f} | "
                     f"{row['sqes_per_request']:.2f} | {row['cqes_per_request']:.2f} | {row['most_cqes_per_enter']} |")
    settings = data["settings"]
    lines += ["", f"{settings['clients']} keep-alive clients, one `GET /` each per round, {settings['rounds']} "
              f"rounds after a warm-up round, the load from another process; {data['date'][:10]}, load average "
              f"{data['load_average'][0] if data['load_average'] else '?'}. Command: `{data['command']}`."]
    return "\n".join(lines) + "\n"


def figure(data: dict, path: Path) -> None:
    """completion.svg: per enter, SQEs submitted (up) and CQEs brought back (down), per stage."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(data["batches"])
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.2 * len(names)), sharex=True, squeeze=False)
    for ax, stage in zip(axes[:, 0], names):
        calls = data["batches"][stage]["calls"][:60]
        xs = range(len(calls))
        ax.bar(xs, [c[1] for c in calls], color="#3182bd", label="SQEs submitted")
        ax.bar(xs, [-c[2] for c in calls], color="#e6550d", label="CQEs brought back")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_ylabel(stage)
        ax.spines[["top", "right"]].set_visible(False)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="upper center", frameon=False, ncol=2, fontsize=9)
    axes[-1, 0].set_xlabel("io_uring_enter calls, in order (the first 60 of the counted rounds)")
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def compared() -> list[servers.Server]:
    """The servers COMPARED names: a stage's, or else a peer's."""
    every_stage = {stage.name for stage in stages.STAGES}
    return [servers.stage_server(stages.get(name)) if name in every_stage else servers.peer_server(name)
            for name in COMPARED]


def sqpoll_server() -> servers.Server:
    """c-uring with an SQ poll thread: the same binary, TINYLOOP_SQPOLL=SQPOLL_IDLE_MS in its environment."""
    plain = servers.peer_server("c-uring")
    return dataclasses.replace(plain, name="c-uring-sqpoll", env={"TINYLOOP_SQPOLL": str(SQPOLL_IDLE_MS)},
                               summary=f"{plain.summary}; IORING_SETUP_SQPOLL, sq_thread_idle {SQPOLL_IDLE_MS} ms")


def threads(pid: int) -> dict[str, dict]:
    """Process ``pid``'s threads from /proc/PID/task (proc(5)): {tid: {name, cpu_s (utime + stime,
    clock ticks), last_cpu (the CPU it last ran on), allowed (its Cpus_allowed_list)}}."""
    found = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": fields from state on
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue  # ended between listing and reading
        allowed = next((line.split(":", 1)[1].strip() for line in status.splitlines()
                        if line.startswith("Cpus_allowed_list:")), None)
        # proc(5) numbers from 1 with pid and comm: utime is field 14, stime 15, processor 39.
        found[tid] = {"name": name, "cpu_s": (int(fields[11]) + int(fields[12])) / tick,
                      "last_cpu": int(fields[36]), "allowed": allowed}
    return found


def measure_sqpoll_point(server: servers.Server, depth: int, settings: Settings, pinning: dict,
                         workdir: Path, warmup: int) -> dict:
    """``server`` under wrk at ``depth``: CPU time per request (µs), requests/s, and its threads."""
    load = loads.get(syscalls.DEPTH_LOADS[depth])
    record: dict = {"server": server.name, "depth": depth, "load": load.name, "status": "error", "note": None}
    process, failure = servers.start(server, pinning["server_prefix"], warmup, settings.socket_timeout)
    if process is None:
        return {**record, "note": failure[1]}
    try:
        before, tasks_before = cpu_seconds(process), threads(process.pid)
        result, _, _ = loads.run(load, f"http://{process.host}:{process.port}/", settings, workdir,
                                 pinning["load_prefix"])
        after, tasks_after = cpu_seconds(process), threads(process.pid)
    finally:
        process.stop()
    if not result.completed or before is None or after is None:
        return {**record, "note": result.error or "no request answered, or no CPU clock"}
    cpu = after - before
    tasks = [{**task, "cpu_s": round(task["cpu_s"] - tasks_before.get(tid, {"cpu_s": 0.0})["cpu_s"], 3)}
             for tid, task in sorted(tasks_after.items(), key=lambda item: int(item[0]))]
    poller = next((t for t in tasks if t["name"].startswith("iou-sqp")), None)
    return {**record, "status": "ok", "requests": result.completed, "seconds": result.seconds,
            "rps": round(result.rps or result.completed / result.seconds, 1), "cpu_s": round(cpu, 4),
            "cpu_us_per_request": round(cpu * 1e6 / result.completed, 3),
            "threads_cpu_s": round(sum(t["cpu_s"] for t in tasks), 3), "threads": tasks,
            "poller_cpu_share": round(poller["cpu_s"] / cpu, 3) if poller and cpu else None,
            "note": f"wrk counted {result.failed} failed requests" if result.failed else None}


def measure_sqpoll(quick: bool) -> dict:
    """c-uring and c-uring-sqpoll under the same wrk loads (depth 1 and 24), pinned; and the decision."""
    experiment.require("completion", "wrk")
    chosen = [servers.peer_server("c-uring"), sqpoll_server()]
    ready, skipped = experiment.prepared(chosen, servers.prepare, "completion")
    duration, warmup = (1.0, 20) if quick else (5.0, 200)
    settings = Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
    pinning = pin()
    with tempfile.TemporaryDirectory(prefix="completion-sqpoll-") as workdir:
        points = [measure_sqpoll_point(server, depth, settings, pinning, Path(workdir), warmup)
                  for depth in syscalls.DEPTH_LOADS for server in ready]
    return {"settings": {"quick": quick, "duration_s": duration, "warmup_requests": warmup,
                         "sq_thread_idle_ms": SQPOLL_IDLE_MS},
            "pinning": {k: v for k, v in pinning.items() if not k.endswith("_prefix")},
            "cpu_source": CPU_SOURCE, "skipped": skipped, "points": points, **sqpoll_decision(points)}


def sqpoll_decision(points: list[dict]) -> dict:
    """The rule: SQPOLL is used only if c-uring-sqpoll's CPU per request is below c-uring's at every
    depth.  Returns ``uses`` (bool or None: not measured), ``decision`` (the words the chapter
    quotes) and ``cpu_ratio`` {depth: sqpoll / plain CPU per request}."""
    cpu = {(p["server"], p["depth"]): p.get("cpu_us_per_request") for p in points if p["status"] == "ok"}
    ratios = {str(depth): round(cpu[("c-uring-sqpoll", depth)] / cpu[("c-uring", depth)], 2)
              for depth in syscalls.DEPTH_LOADS
              if cpu.get(("c-uring", depth)) and cpu.get(("c-uring-sqpoll", depth))}
    if len(ratios) < len(syscalls.DEPTH_LOADS):
        return {"uses": None, "decision": "not measured", "cpu_ratio": ratios}
    uses = all(ratio < 1 for ratio in ratios.values())
    return {"uses": uses, "decision": "uses SQPOLL" if uses else "does not use SQPOLL", "cpu_ratio": ratios}


def render_sqpoll(data: dict) -> str:
    """completion_sqpoll.md, from the JSON alone."""
    sq = data["sqpoll"]
    calls = {(p["server"], p["depth"]): p["per_request"]["total"]
             for p in data["syscalls"]["points"] if p.get("per_request")}
    lines = ["| server | depth | requests/s | server CPU per request, µs | of it, the SQ thread "
             "| system calls per request |", "|---|---:|---:|---:|---:|---:|"]
    for p in sq["points"]:
        if p["status"] != "ok":
            lines.append(f"| `{p['server']}` | {p['depth']} | {p['note']} | | | |")
            continue
        share = f"{p['poller_cpu_share']:.0%}" if p["poller_cpu_share"] is not None else "—"
        called = calls.get((p["server"], p["depth"]))
        lines.append(f"| `{p['server']}` | {p['depth']} | {p['rps']:,.0f} | {p['cpu_us_per_request']:.2f} "
                     f"| {share} | {_three_places(called) if called is not None else '—'} |")
    pin = sq["pinning"]
    where = (f"server on CPU {pin['server_cpus']} (its SQ thread inherits that affinity: sq_thread_cpu unset), "
             f"wrk on CPU {pin['load_cpus']}" if pin.get("enabled") else f"unpinned ({pin.get('reason')})")
    lines += ["", f"wrk {sq['settings']['duration_s']:g} s per row after {sq['settings']['warmup_requests']} "
              f"requests of warm-up; {where}; sq_thread_idle {sq['settings']['sq_thread_idle_ms']} ms; CPU from "
              f"{sq['cpu_source']}, which counts every thread of the process. Decision: this floor "
              f"{sq['decision']} (SQPOLL only if it lowers CPU per request at both depths). "
              f"{data['date'][:10]}, load average {data['load_average'][0] if data['load_average'] else '?'}."]
    return "\n".join(lines) + "\n"


def _three_places(value: float) -> str:
    # One call per thousand requests is this table's point: two places would show it as 0.00.
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


@functools.cache
def pin() -> dict:
    """choose_pinning's answer, asked once: it moves this process onto the load's CPU, after which a
    second call would see one usable CPU and pin nothing."""
    return choose_pinning(False)


def count_syscalls(quick: bool) -> dict:
    """benchmarks.syscalls' points for COMPARED at depth 1 and 24, in its JSON's shape."""
    if problem := strace_problem():
        return {"skipped": f"strace cannot count here: {problem}", "points": []}
    experiment.require("completion", "wrk")
    chosen = [*compared(), sqpoll_server()]
    ready, skipped = experiment.prepared(chosen, servers.prepare, "completion")
    duration, warmup = (1.0, 20) if quick else (3.0, 200)
    settings = Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
    pinning = pin()
    with tempfile.TemporaryDirectory(prefix="completion-syscalls-") as workdir:
        points = [syscalls.measure(server, depth, settings, pinning, Path(workdir), warmup)
                  for server in ready for depth in syscalls.DEPTH_LOADS]
    return {"settings": {"quick": quick, "duration_s": duration, "warmup_requests": warmup},
            "tools": {"strace": version_line(["strace", "-V"]), "wrk": version_line(["wrk", "-v"])},
            "commands": {str(depth): display(loads.command(loads.get(name), "http://127.0.0.1:PORT/", settings))
                         for depth, name in syscalls.DEPTH_LOADS.items()},
            "skipped": skipped, "points": points}


def measure_memory(quick: bool) -> dict:
    """benchmarks.memory's runs and summary for COMPARED, in its JSON's shape."""
    counts = list(memory.QUICK_COUNTS if quick else memory.COUNTS)
    limit = raise_nofile(max(counts) + memory.ROOM)
    notes = []
    if left_out := [n for n in counts if n + memory.ROOM > limit]:
        notes.append(f"left out: {', '.join(f'{n:,}' for n in left_out)} connections (descriptor limit {limit:,})")
        counts = [n for n in counts if n not in left_out]
    chosen = compared()
    ready, skipped = experiment.prepared(chosen, servers.prepare, "completion")
    results = {}
    for server in ready:
        runs = [memory.measure(server, counts)]
        results[server.name] = {**memory.summarize(runs, counts), "runs": runs}
    return {"counts": counts, "notes": notes, "settings": {"repeat": 1},
            "servers": [{"name": s.name, "kind": s.kind, "summary": s.summary, "skipped": skipped.get(s.name)}
                        for s in chosen], "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("completion", __doc__, repeat=None, pin=False)
    parser.add_argument("--serve", choices=list(STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.record)
        return 0
    if reason := uring.unavailable():
        print(f"benchmarks.completion: not run: {reason}", file=sys.stderr)
        return 1
    out = output.json_path(parser, args, "completion.json")
    clients, rounds = (4, 3) if args.quick else (CLIENTS, ROUNDS)
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="completion-batches-") as tmp:
        batches = {stage: measure(stage, Path(tmp), clients, rounds) for stage in STAGES}
    counted = count_syscalls(args.quick)
    held = measure_memory(args.quick)
    polled = measure_sqpoll(args.quick)
    data = experiment.document("completion", argv, clock, settings={"clients": clients, "rounds": rounds,
                               "quick": args.quick}, batches=batches, syscalls=counted, memory=held,
                               sqpoll=polled)
    data["elapsed_s"] = clock.elapsed()
    figure(data, out.with_suffix(".svg"))
    sub = {key: {**{k: data[k] for k in ("date", "command", "machine", "load_average", "schema")}, **data[key],
                 "settings": {**data[key].get("settings", {}), "quick": args.quick}}
           for key in ("syscalls", "memory")}
    extra = {out.with_name("completion_batches.md"): render_batches(data),
             # The SQPOLL row's counts are in completion_sqpoll.md, beside its CPU per request.
             out.with_name("completion_syscalls.md"): syscalls.markdown(
                 {**sub["syscalls"], "points": [p for p in sub["syscalls"]["points"] if p["server"] != "c-uring-sqpoll"]},
                 _three_places),
             out.with_name("completion_memory.md"): memory.render(sub["memory"]),
             out.with_name("completion_sqpoll.md"): render_sqpoll(data)}
    experiment.finish(data, out, "\n".join(extra.values()), conclusion(data), extra=extra)
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: SQEs per request, system calls per request at depth 24, bytes per idle
    connection, and SQPOLL's CPU per request against the plain ring's."""
    parts = [f"{stage} {row['sqes_per_request']:.2f} SQEs/request" for stage, row in data["batches"].items()]
    for point in data["syscalls"]["points"]:
        if point["depth"] == 24 and point.get("per_request"):
            parts.append(f"{point['server']} {point['per_request']['total']:.3f} calls/request at depth 24")
    for name, row in data["memory"]["results"].items():
        if row.get("bytes_per_connection") is not None:
            parts.append(f"{name} {row['bytes_per_connection'] / 1024:.1f} KiB/idle connection")
    for depth, ratio in data["sqpoll"]["cpu_ratio"].items():
        parts.append(f"SQPOLL {ratio:.2f}x the CPU per request at depth {depth}")
    parts.append(f"c-uring {data['sqpoll']['decision']}")
    return experiment.sentence("completion", parts)


if __name__ == "__main__":
    sys.exit(main())
