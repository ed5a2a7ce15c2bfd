# benchmarks/stack_cost.py
"""What does keeping a task's stack by hand cost, against ``yield from``?

    python -m benchmarks.stack_cost                 the table: stack_cost.json and .txt
    python -m benchmarks.stack_cost --quick         fewer iterations, for a look
    python -m benchmarks.stack_cost --profile       the two servers under cProfile: profile_generators.txt

On both generator schedulers, each on a new Loop, in ns, timed by pyperf
(benchmarks/harness/pyperf_runs.py; the garbage collector off while timed):
a call and return through D generators, a trap answered at once D
generators deep, a reactor trip (``sleep(0)``), and for scale D plain
function calls.  ``--profile``: benchmarks/harness/profiling.py.
"""

from __future__ import annotations

import gc
import sys
import time

from benchmarks.harness import experiment, output, pyperf_runs
from benchmarks.harness.process import realtime_self
from benchmarks.harness.render import align, describe_machine
from benchmarks.harness.profiling import profile_stage
from benchmarks.harness.summary import summarize
from tinyloop.callbacks.loop import Loop
from tinyloop.generators.scheduler import Scheduler
from tinyloop.generators.traps import current_task, sleep
from tinyloop.generators.yieldfrom import YieldFromScheduler

DEPTHS = (1, 5, 20)


# --- the work, written for each scheduler --------------------------------------

def stack_chain(depth):
    """``depth`` nested calls by bare ``yield`` (depth 1 is a generator too); the innermost returns 1."""
    if depth == 1:
        return 1
    return (yield stack_chain(depth - 1))


def yf_chain(depth):
    if depth == 1:
        return 1
    return (yield from yf_chain(depth - 1))


def stack_calls(depth, number):
    for _ in range(number):
        yield stack_chain(depth)


def yf_calls(depth, number):
    for _ in range(number):
        yield from yf_chain(depth)


def stack_traps_at(depth, number):
    """``number`` current_task() traps from a generator ``depth`` calls deep."""
    if depth > 1:
        yield stack_traps_at(depth - 1, number)
        return
    for _ in range(number):
        yield current_task()


def yf_traps_at(depth, number):
    if depth > 1:
        yield from yf_traps_at(depth - 1, number)
        return
    for _ in range(number):
        yield from current_task()


def stack_sleeps(number):
    for _ in range(number):
        yield sleep(0)


def yf_sleeps(number):
    for _ in range(number):
        yield from sleep(0)


def plain_chain(depth):
    return 1 if depth == 1 else plain_chain(depth - 1)


def plain_calls(depth, number):
    for _ in range(number):
        plain_chain(depth)


# --- measuring -------------------------------------------------------------------

# measure name -> (what it is, stack coroutine, yield-from coroutine, takes a depth)
MEASURES = {
    "call+return": ("call and return through D generators", stack_calls, yf_calls, True),
    "trap": ("one trap answered at once, D generators deep", stack_traps_at, yf_traps_at, True),
    "reactor trip": ("sleep(0): suspend, one reactor iteration, resume", stack_sleeps, yf_sleeps, False),
}


def time_side(loops, measure, side, depth):
    """Seconds for ``loops`` operations of ``measure`` at ``depth`` on ``side`` (``"stack"``,
    ``"yieldfrom"`` or ``"plain"``), with the garbage collector off: pyperf's time function."""
    _, stack_coro, yf_coro, by_depth = MEASURES[measure]
    loop = Loop()
    gc.disable()
    try:
        if side == "plain":
            started = time.perf_counter()
            plain_calls(depth, loops)
            return time.perf_counter() - started
        scheduler = (Scheduler if side == "stack" else YieldFromScheduler)(loop)
        coro = (stack_coro if side == "stack" else yf_coro)(*((depth, loops) if by_depth else (loops,)))
        started = time.perf_counter()
        scheduler.run(coro)
        return time.perf_counter() - started
    finally:
        gc.enable()
        loop.close()


# pyperf's table: every (measure, depth, side) once, named "measure/depth/side"; plain calls beside call+return.
CELLS = [(name, depth) for name, entry in MEASURES.items() for depth in (DEPTHS if entry[3] else (1,))]
SIDES = {name: ("stack", "yieldfrom", *(("plain",) if name == "call+return" else ())) for name in MEASURES}
TIMINGS = [pyperf_runs.Timing(f"{name}/{depth}/{side}", time_side, (name, side, depth))
           for name, depth in CELLS for side in SIDES[name]]


def measure(options):
    """The table's rows, from one pyperf run of TIMINGS with ``options`` (pyperf's)."""
    values = pyperf_runs.run("benchmarks.stack_cost:TIMINGS", [timing.name for timing in TIMINGS], options)
    rows = []
    for name, depth in CELLS:
        ns = {side: summarize(v * 1e9 for v in values[f"{name}/{depth}/{side}"]) for side in SIDES[name]}
        row = {"measure": name, "what": MEASURES[name][0], "depth": depth,
               "values": len(values[f"{name}/{depth}/stack"]),
               "noisy": ns["stack"]["noisy"] or ns["yieldfrom"]["noisy"]}
        for side in ("stack", "yieldfrom"):
            row[f"{side}_ns"], row[f"{side}_ns_range"] = ns[side]["median"], [ns[side]["min"], ns[side]["max"]]
        if "plain" in ns:
            row["plain_ns"] = ns["plain"]["median"]
        rows.append(row)
    return rows


def render(data):
    """The text table, from the JSON alone."""
    header = ["operation", "D", "stack", "yield from", "stack / yf", "plain calls"]
    rows = [[row["measure"], str(row["depth"]),
             *(f"{row[key]:.0f} ({low:.0f}–{high:.0f})" for key in ("stack_ns", "yieldfrom_ns")
               for low, high in [row[f"{key}_range"]]),
             f"{row['stack_ns'] / row['yieldfrom_ns']:.1f}x" + (" noisy" if row.get("noisy") else ""),
             f"{row['plain_ns']:.0f}" if "plain_ns" in row else ""] for row in data["rows"]]
    return "\n".join([
        "Stack scheduler vs yield from: ns per operation, median (min–max) of pyperf's values "
        f"({data['settings']['pyperf']})", "", *("  " + line for line in align(header, rows)), "",
        "  call+return: D generator calls and returns, no trap;  trap: current_task() answered at once, "
        "D generators deep;",
        "  reactor trip: sleep(0), one loop iteration;  plain calls: D nested function calls.",
        "  noisy: a figure's runs differ by more than 25% (the largest over 1.25 times the smallest).",
        f"  {describe_machine(data)}"]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: a hand-kept stack's cost over yield from's, per measure at the deepest depth."""
    deepest = max(row["depth"] for row in data["rows"])
    return experiment.sentence(f"a hand-kept generator stack against yield from, at depth {deepest}", [
        f"{row['measure']} {row['stack_ns'] / row['yieldfrom_ns']:.1f}×"
        for row in data["rows"] if row["depth"] == deepest])


def main(argv=None):
    parser = experiment.parser("stack_cost", __doc__, repeat=None, pin=False)
    parser.add_argument("--profile", action="store_true",
                        help="instead: profile the generators and yieldfrom servers under ab -k")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "stack_cost.json")
    if args.profile:
        text = "\n".join(profile_stage(stage, 2000) for stage in ("generators", "yieldfrom"))
        return output.print_and_write(text, out.with_name("profile_generators.txt"))
    where = realtime_self()  # one core, no migrations, no preemption by other work
    options = pyperf_runs.QUICK if args.quick else pyperf_runs.DEFAULT
    clock = experiment.Clock()
    rows = measure(options)
    data = experiment.document("stack_cost", argv, clock, pinning={"process": where}, settings={
        "quick": args.quick, "depths": list(DEPTHS), "pyperf": " ".join(options),
        "timer": "pyperf bench_time_func, gc off while timed, time.perf_counter",
        "repeat": rows[0]["values"]}, rows=rows)  # repeat: pyperf's values per figure, for the caption
    return experiment.conclude(data, out, clock, render, conclusion)


if __name__ == "__main__":
    sys.exit(main())
