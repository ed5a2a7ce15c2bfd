# benchmarks/syscalls.py
"""System calls per request, on every stage and peer, with and without pipelining.

    python -m benchmarks.syscalls                       every stage and peer, depth 1 and 24
    python -m benchmarks.syscalls --quick               a smoke run: 1 s per point
    python -m benchmarks.syscalls --stages epoll,aio --peers none

Per server and pipelining depth: a fresh server, warmed up, counted by
``strace -c -f -p PID`` (benchmarks/harness/strace.py) over one short wrk
load (depth 1: ``wrk``; depth 24: ``wrk-pipeline``, Japronto's 24 requests
per write); each call's count over the requests wrk counted.  A traced
server runs several times slower, so only counts are reported; at depth 1
it finds more connections ready per wait, so *wait* reads a little low.
The server also answers requests wrk never reads (those in flight when it
stops), so the figures lean high by at most ``in_flight_bound`` over the
total.  (perf's ``syscalls:sys_enter_*`` would need an event per call name
and, on many kernels, root.)  Writes syscalls.json and .md.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks import loads, servers
from benchmarks.harness import experiment, output
from benchmarks.harness.machine import display, version_line
from benchmarks.harness.process import choose_pinning
from benchmarks.harness.render import DASH, machine_line, markdown as table_lines
from benchmarks.harness.strace import Strace, parse_strace_summary, strace_problem
from benchmarks.loads import Settings

__all__ = ["DEPTH_LOADS", "GROUPS", "main", "markdown", "measure", "per_request"]

# Pipelining depth -> the harness load that sends it (benchmarks/loads.py).
DEPTH_LOADS = {1: "wrk", 24: "wrk-pipeline"}

# The table's columns: each gathers the calls that do one job, by name, so
# that servers using read(2) and servers using recvfrom(2) land together.
GROUPS: dict[str, tuple[str, ...]] = {
    "read": ("read", "readv", "recvfrom", "recvmsg", "recvmmsg"),
    "write": ("write", "writev", "sendto", "sendmsg", "sendmmsg"),
    "wait": ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "kevent"),
    # libuv (uvloop, Node) hands its epoll_ctl changes to the kernel in
    # batches through io_uring (IORING_OP_EPOLL_CTL), one io_uring_enter each.
    "epoll_ctl": ("epoll_ctl", "io_uring_enter"),
    "accept+close": ("accept", "accept4", "close", "shutdown"),
}


def measure(server: servers.Server, depth: int, settings: Settings, pinning: dict,
            workdir: Path, warmup: int) -> dict:
    """Start ``server``, warm it up, count its system calls under one wrk load of ``depth``.

    Returns the point's JSON record: ``status`` is ``"ok"`` or ``"error"``
    with a ``note``; ``requests`` is wrk's count of answered requests;
    ``calls`` maps each system call's name to strace's count over the load;
    ``per_request`` is :func:`per_request` of them.
    """
    load = loads.get(DEPTH_LOADS[depth])
    record: dict = {"server": server.name, "depth": depth, "load": load.name, "status": "error",
                    "note": None, "requests": None, "seconds": None, "calls": None, "per_request": None,
                    "in_flight_bound": load.concurrency * load.pipeline}
    process, failure = servers.start(server, pinning["server_prefix"], warmup, settings.socket_timeout)
    if process is None:
        return {**record, "note": failure[1]}
    summary = workdir / f"{server.name}-{depth}.strace"
    try:
        with Strace(process.pid, ["-c"], summary):
            result, _, _ = loads.run(load, f"http://{process.host}:{process.port}/", settings, workdir,
                                     pinning["load_prefix"])
    except RuntimeError as error:
        return {**record, "note": str(error)}
    finally:
        process.stop()
    calls = parse_strace_summary(summary.read_text()) if summary.exists() else {}
    record.update(requests=result.completed, seconds=result.seconds, calls=calls)
    if not result.completed:
        return {**record, "note": result.error or "wrk counted no answered request"}
    if not calls:
        return {**record, "note": "strace counted no system call"}
    return {**record, "per_request": per_request(calls, result.completed), "status": "ok",
            "note": f"wrk counted {result.failed} failed requests" if result.failed else None}


def per_request(calls: dict[str, int], requests: int) -> dict[str, float]:
    """Group ``calls`` by GROUPS (the rest is ``"other"``) and divide each by ``requests``."""
    grouped = {group: sum(calls.get(name, 0) for name in names) for group, names in GROUPS.items()}
    total = sum(calls.values())
    return {**{group: n / requests for group, n in grouped.items()},
            "other": (total - sum(grouped.values())) / requests, "total": total / requests}


def _figure(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def table(data: dict, figure: Callable[[float], str] = _figure) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: one row per server and depth, in the run's order; the last column
    names the three largest calls outside GROUPS, per request (``"futex 0.51, ioctl 0.02"``).
    ``figure`` formats a count per request."""
    header = ["server", "depth", "requests", *GROUPS, "other", "total", "largest others"]
    grouped = {name for names in GROUPS.values() for name in names}
    rows = []
    for record in data["points"]:
        head = [record["server"], str(record["depth"])]
        if record["status"] != "ok":
            rows.append([*head, "error", *[DASH] * (len(header) - 4), record["note"] or DASH])
            continue
        calls, requests = record["calls"], record["requests"]
        # From the counts, so that the table follows GROUPS as they are now.
        figures = per_request(calls, requests)
        others = sorted(((n, call) for call, n in calls.items() if call not in grouped), reverse=True)[:3]
        rows.append([*head, str(requests), *(figure(figures[key]) for key in (*GROUPS, "other", "total")),
                     ", ".join(f"{call} {figure(n / requests)}" for n, call in others if n) or DASH])
    return header, rows


def markdown(data: dict, figure: Callable[[float], str] = _figure) -> str:
    """The results as a Markdown page fragment: the table (counts by ``figure``), then how it was made."""
    settings = data["settings"]
    how = "--quick: a smoke test" if settings["quick"] else "one run per row"
    load = data.get("load_average")
    notes = [
        "",
        f"System calls per answered request, counted by `strace -c -f -p PID` over a "
        f"{settings['duration_s']:g} s wrk load per row (depth 1: `{data['commands']['1']}`; "
        f"depth 24: `{data['commands']['24']}`).",
        "Columns: " + "; ".join(f"**{group}** = {', '.join(names)}" for group, names in GROUPS.items())
        + "; **other** = every other call (the largest of them in the last column).",
        "Under strace the server runs several times slower, so these rows say how many calls, "
        "never how fast; a slowed server finds more connections ready per wait, so at depth 1 "
        "*wait* reads a little low.",
        f"Measured on: {machine_line(data)}, {data['tools']['strace']}; {how}; {data['date'][:10]}"
        + (f"; load average {max(load):.1f} (counts, unlike times, barely move with it)"
           if load else "") + f". Command: `{data['command']}`.",
    ]
    if data.get("skipped"):
        notes.append("Not measured: " + "; ".join(f"{name} ({note})" for name, note in data["skipped"].items()) + ".")
    return "\n".join(table_lines(*table(data, figure)) + notes) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: system calls per request at each depth, fewest and most."""
    parts = []
    for depth in DEPTH_LOADS:
        totals = {point["server"]: point["per_request"]["total"] for point in data["points"]
                  if point["depth"] == depth and point.get("per_request")}
        if totals:
            low, high = min(totals, key=totals.get), max(totals, key=totals.get)
            parts.append(f"depth {depth}: {low} {totals[low]:.2f} to {high} {totals[high]:.2f}")
    return ("system calls per request, " + "; ".join(parts)) if parts else "syscalls: nothing measured"


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("syscalls", __doc__, repeat=None)
    parser.add_argument("--stages", help="comma list, 'all' or 'none' (default all)")
    parser.add_argument("--peers", help="comma list, 'all' or 'none' (default every peer but stall)")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "syscalls.json")
    if problem := strace_problem():
        raise SystemExit(f"benchmarks.syscalls: cannot count system calls here: {problem}")
    experiment.require("syscalls", "wrk")
    ready, skipped = experiment.prepared(servers.choose(args.stages, args.peers), servers.prepare, "syscalls")
    cells = [(server, depth) for server in ready for depth in DEPTH_LOADS]
    # Seconds of wrk per point, and warm-up requests.  Under strace a Python server answers a few
    # thousand requests a second at depth 1: even the quick run counts thousands of requests
    # against an in-flight bound of 100.
    duration, warmup = (1.0, 20) if args.quick else (3.0, 200)
    settings = Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
    pinning = choose_pinning(args.no_pin)
    print(f"{len(cells)} points, {duration:g} s each under strace; about {len(cells) * (duration + 1.5):.0f} s",
          flush=True)
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-syscalls-") as workdir:
        points = experiment.interleave(
            cells, 1, lambda cell: measure(*cell, settings, pinning, Path(workdir), warmup),
            lambda cell: f"{cell[0].name} depth {cell[1]}",
            lambda r: f"{r['per_request']['total']:.2f} calls/req over {r['requests']} requests")
    data = experiment.document(
        "syscalls", argv, clock, pinning=pinning,
        tools={"strace": version_line(["strace", "-V"]), "wrk": version_line(["wrk", "-v"])},
        settings={"quick": args.quick, "duration_s": duration, "warmup_requests": warmup,
                  "counter": "strace -c -f -p PID, attached after the warm-up, detached when wrk ends"},
        commands={str(depth): display(loads.command(loads.get(name), "http://127.0.0.1:PORT/", settings))
                  for depth, name in DEPTH_LOADS.items()},
        groups=GROUPS, skipped=skipped, points=[{k: v for k, v in p.items() if k != "rep"} for p in points])
    return experiment.conclude(data, out, clock, markdown, conclusion, ".md")


if __name__ == "__main__":
    raise SystemExit(main())
