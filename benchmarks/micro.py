# benchmarks/micro.py
"""The loop's own costs, one operation at a time, measured with pyperf.

    python -m benchmarks.micro                    every operation (OPERATIONS) on every loop
    python -m benchmarks.micro --quick            a short look (few processes, short values)
    python -m benchmarks.micro --event-loops asyncio,aio --ops call_soon,sleep0 [any pyperf option]

benchmarks/README.md describes the operations, the loops and the output
(pyperf's own JSON beside micro.json); the book renders the reference's ({bench-micro}).
"""

# Each time function runs ``loops`` operations and returns the seconds they
# took: loop set-up and tear-down outside, the work the loop does because of
# the operation (running the callback, dropping the cancelled timer) inside.

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness import experiment, output, pyperf_runs
from benchmarks.harness.layout import usable_cpus
from benchmarks.harness.machine import package_version
from benchmarks.harness.process import choose_names, realtime_self
from benchmarks.harness.render import DASH, align, machine_line, number, spread_cell
from benchmarks.harness.summary import is_noisy
from benchmarks.peers.echo_server import LOOPS, loop_factory

__all__ = ["OPERATIONS", "LOOP_NAMES", "TIMINGS", "benchmarks", "describe_machine", "format_text", "summarize",
           "table", "main"]

BASELINE = "asyncio"

# Each batch of operations ends in one pass of run_forever; large enough that
# starting and stopping the loop is a small share of the batch.
BATCH = 10_000

# pyperf's settings.  The default run (14 benchmarks) takes about a minute
# and a half on a 2-core machine; --quick a few seconds per benchmark.
DEFAULT_PYPERF = {"processes": 5, "values": 3, "warmups": 1, "min_time": 0.05}
QUICK_PYPERF = {"processes": 2, "values": 2, "warmups": 1, "min_time": 0.02}


def noop() -> None:
    """The callback every timed operation schedules: it does nothing."""


async def _nothing() -> None:
    return None


def _batches(loops: int, factory: Callable[[], Any], schedule: Callable[[Any, int], None]) -> float:
    """Seconds for ``loops`` operations on a new loop: ``schedule(loop, n)`` queues a batch of
    ``n``, then one pass of run_forever runs it (stopped by a last callback)."""
    loop = factory()
    try:
        started = time.perf_counter()
        left = loops
        while left:
            n = min(left, BATCH)
            left -= n
            schedule(loop, n)
            loop.call_soon(loop.stop)
            loop.run_forever()
        return time.perf_counter() - started
    finally:
        loop.close()


def _in_loop(factory: Callable[[], Any], main: Callable[[], Any]) -> float:
    """What ``main()`` returns (its own timing), run to completion on a new loop from ``factory``."""
    loop = factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def time_call_soon(loops: int, factory: Callable[[], Any]) -> float:
    """``loops`` call_soon callbacks; each batch's stop callback is its last operation."""
    def schedule(loop: Any, n: int) -> None:
        for _ in range(n - 1):
            loop.call_soon(noop)
    return _batches(loops, factory, schedule)


def time_timer_cancel(loops: int, factory: Callable[[], Any]) -> float:
    """``loops`` timers an hour ahead, cancelled; after each batch the loop runs once, which is
    where a heap with many cancelled timers gets cleaned."""
    def schedule(loop: Any, n: int) -> None:
        for _ in range(n):
            loop.call_later(3600.0, noop).cancel()
    return _batches(loops, factory, schedule)


def time_sleep0(loops: int, factory: Callable[[], Any]) -> float:
    async def main() -> float:
        started = time.perf_counter()
        for _ in range(loops):
            await asyncio.sleep(0)
        return time.perf_counter() - started
    return _in_loop(factory, main)


def time_create_task(loops: int, factory: Callable[[], Any]) -> float:
    async def main() -> float:
        create_task = asyncio.get_running_loop().create_task
        started = time.perf_counter()
        for _ in range(loops):
            await create_task(_nothing())
        return time.perf_counter() - started
    return _in_loop(factory, main)


# name -> (function, what one operation is, whether the reactor can run it)
OPERATIONS: dict[str, tuple[Callable[[int, Callable[[], Any]], float], str, bool]] = {
    "call_soon": (time_call_soon, "call_soon + run one callback", True),
    "timer_cancel": (time_timer_cancel, "call_later + cancel one timer", True),
    "sleep0": (time_sleep0, "one await asyncio.sleep(0) round trip", False),
    "create_task": (time_create_task, "create_task + await a trivial coroutine", False),
}
REACTOR = "callbacks"  # Part II's reactor: no tasks, so only the operations marked True
LOOP_NAMES = (*LOOPS, REACTOR)


def factory_for(name: str) -> Callable[[], Any]:
    """A function returning a new loop called ``name``; ImportError when it is not installed."""
    if name == REACTOR:
        from tinyloop.callbacks.loop import Loop
        return Loop
    return loop_factory(name)


def benchmarks(loops: list[str], ops: list[str]) -> list[tuple[str, str]]:
    """``(operation, loop)`` pairs to measure, operation-major, in a fixed order."""
    return [(op, loop) for op in ops for loop in loops if loop != REACTOR or OPERATIONS[op][2]]


def _timed(loops: int, op: str, loop: str) -> float:
    """pyperf's time function: ``loops`` of ``op`` on a new ``loop``, in seconds."""
    return OPERATIONS[op][0](loops, factory_for(loop))


# pyperf_runs' table, the same in every worker: every (operation, loop), the reactor's where it can run.
TIMINGS = [pyperf_runs.Timing(f"{op}[{loop}]", _timed, (op, loop))
           for op, loop in benchmarks(list(LOOP_NAMES), list(OPERATIONS))]


def summarize(values: dict[tuple[str, str], list[float]], baseline: str = BASELINE) -> dict[str, dict[str, dict]]:
    """``{operation: {loop: row}}`` from each benchmark's values (seconds per operation).

    A row has ``median_ns``, ``mean_ns``, ``stdev_ns``, ``ops_per_s``
    (1 / median), ``values``, ``spread_ns`` [min, max], ``noisy`` (by
    summary.is_noisy) and ``ratio``: its median time over the baseline
    loop's (below 1 is faster), None without a baseline row.
    """
    out: dict[str, dict[str, dict]] = {}
    for (op, loop), seconds in values.items():
        ns = [value * 1e9 for value in seconds]
        median = statistics.median(ns)
        out.setdefault(op, {})[loop] = {
            "median_ns": median, "mean_ns": statistics.fmean(ns),
            "stdev_ns": statistics.stdev(ns) if len(ns) > 1 else 0.0,
            "ops_per_s": 1e9 / median if median else None, "values": len(ns),
            "spread_ns": [min(ns), max(ns)], "noisy": is_noisy([min(ns), max(ns)])}
    for rows in out.values():
        base = rows.get(baseline)
        for row in rows.values():
            row["ratio"] = row["median_ns"] / base["median_ns"] if base else None
    return out


def table(data: dict, op: str) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` for one operation, loops in the run's order; a skipped loop says so."""
    rows = []
    for loop in data["loops"]:
        row = data["results"].get(op, {}).get(loop["name"])
        if loop.get("skipped"):
            rows.append([loop["name"], "skipped", DASH, DASH, DASH])
        elif row is not None:  # (none for the reactor's missing operations)
            rows.append([loop["name"], number(row["median_ns"]), number(row["ops_per_s"]),
                         DASH if row["ratio"] is None else f"{row['ratio']:.2f}",
                         spread_cell(row["spread_ns"], row["noisy"])])
    return ["loop", "median ns/op", "ops/s", "× asyncio", "min–max ns"], rows


def describe_machine(data: dict) -> str:
    """One line saying where and how: machine, pyperf's settings, pinning, date."""
    settings = data.get("settings", {})
    how = (f"pyperf, {settings.get('processes')} processes x {settings.get('values')} values"
           + (f", on CPU {settings['affinity']}" if settings.get("affinity") else ", unpinned")
           + (", real-time priority" if "SCHED_FIFO" in str(settings.get("process")) else "")
           + (" (--quick: a look, not a measurement)" if settings.get("quick") else ""))
    return f"{machine_line(data)}; {how}; {str(data.get('date', ''))[:10]}"


def format_text(data: dict) -> str:
    """Every operation's table for a terminal, then the skipped loops, the ratio's meaning and the machine."""
    parts = [f"{op['name']}: {op['what']}\n" + "\n".join(align(*table(data, op["name"])))
             for op in data["operations"]]
    notes = [f"{loop['name']}: skipped, {loop['skipped']}" for loop in data["loops"] if loop.get("skipped")]
    notes += ["× asyncio: the median time per operation divided by stdlib asyncio's; below 1 is faster.",
              "Measured on: " + describe_machine(data)]
    return "\n\n".join(parts) + "\n\n" + "\n".join(notes)


def conclusion(data: dict) -> str:
    """The run in one line: each operation's fastest loop, with its time against asyncio's."""
    parts = []
    for op, by_loop in data["results"].items():
        best = min(by_loop, key=lambda loop: by_loop[loop]["median_ns"])
        ratio = by_loop[best]["ratio"]
        parts.append(f"{op} {best}" + (f" {ratio:.2f}× asyncio" if ratio else ""))
    return experiment.sentence("fastest loop per operation", parts)


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("micro", __doc__, repeat=None, pin=False)
    parser.add_argument("--event-loops", default="all",
                        help=f"comma list of loops (default all: {', '.join(LOOP_NAMES)})")
    parser.add_argument("--ops", default="all", help=f"comma list of operations (default all: {', '.join(OPERATIONS)})")
    for key in DEFAULT_PYPERF:
        parser.add_argument(f"--{key.replace('_', '-')}", type=float if key == "min_time" else int,
                            help=f"pyperf's (default {DEFAULT_PYPERF[key]}; --quick {QUICK_PYPERF[key]})")
    parser.add_argument("--affinity", help="pyperf's: the workers' CPUs (default the first usable CPU)")
    args, extra = parser.parse_known_args(argv)  # the rest is pyperf's (--rigorous, --loops ...)
    out = output.json_path(parser, args, "micro.json")
    pick = experiment.settings(parser, args, DEFAULT_PYPERF, QUICK_PYPERF, least={"warmups": 0})
    if args.affinity is None and len(usable_cpus()) >= 2:
        args.affinity = str(usable_cpus()[0])
    options = [*(f"--{key.replace('_', '-')}={value}" for key, value in pick.items()), *extra]
    if args.affinity:
        options.append(f"--affinity={args.affinity}")
    loops = choose_names(args.event_loops, list(LOOP_NAMES), "loop", list(LOOP_NAMES))
    ops = choose_names(args.ops, list(OPERATIONS), "operation", list(OPERATIONS))
    skipped: dict[str, str] = {}
    for name in loops:
        try:
            factory_for(name)
        except ImportError as error:
            skipped[name] = f"does not import ({error})"
    # The workers inherit real-time priority: other work on the machine does not preempt them.
    where = realtime_self(int(args.affinity.split(",")[0]) if args.affinity else None)
    # pyperf's own JSON (every value) beside the summary, but never in the committed folder.
    pyperf_json = (output.LOCAL if out.parent == output.RESULTS else out.parent) / f"{out.stem}-pyperf.json"
    pairs = benchmarks([name for name in loops if name not in skipped], ops)
    clock = experiment.Clock()
    values = pyperf_runs.run("benchmarks.micro:TIMINGS", [f"{op}[{loop}]" for op, loop in pairs], options,
                             keep=pyperf_json)
    baseline = BASELINE if BASELINE in loops and BASELINE not in skipped else None
    data = experiment.document(
        "micro", argv, clock, tools={name: package_version(name) for name in ("pyperf", "uvloop")},
        settings={"quick": args.quick, "processes": pick["processes"], "values": pick["values"],
                  "warmups": pick["warmups"], "min_time_s": pick["min_time"], "affinity": args.affinity,
                  "batch": BATCH, "process": where},
        baseline=baseline, operations=[{"name": op, "what": OPERATIONS[op][1]} for op in ops],
        loops=[{"name": name, "skipped": skipped.get(name)} for name in loops],
        results=summarize({pair: values[f"{pair[0]}[{pair[1]}]"] for pair in pairs}, baseline or ""),
        pyperf_json=output.relative(pyperf_json))
    return experiment.conclude(data, out, clock, format_text, conclusion, None)


if __name__ == "__main__":
    raise SystemExit(main())
