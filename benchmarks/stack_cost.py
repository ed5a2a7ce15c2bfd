# benchmarks/stack_cost.py
"""What does keeping a task's stack by hand cost, against ``yield from``?

    python -m benchmarks.stack_cost                 the table: stack_cost.json and .txt
    python -m benchmarks.stack_cost --quick         fewer iterations, for a look
    python -m benchmarks.stack_cost --profile       the two servers under cProfile: profile_generators.txt

Three measures on both generator schedulers, each on a new Loop, in ns:

    call + return   a task calls a chain of D generators whose innermost returns at once:
                    ``yield callee()`` through the trampoline against ``yield from callee()``
    trap            ``current_task()`` yielded D generators deep, answered at once
    reactor trip    ``sleep(0)`` at depth 1: suspend, one reactor iteration, resume

and, for scale, a chain of D plain function calls.  pyperf times each
(benchmarks/harness/pyperf_runs.py: worker processes pinned to one CPU at
real-time priority where allowed, calibration, warm-ups, the garbage
collector off while timed): the median of its values with their min-max.
``--profile`` runs the two stages' servers under cProfile and ``ab -k -n
2000 -c 10`` (benchmarks/harness/stage_profile.py).
"""

from __future__ import annotations

import gc
import sys
import time

from benchmarks.harness import experiment, output, pyperf_runs
from benchmarks.harness.process import realtime_self
from benchmarks.harness.render import align, describe_machine
from benchmarks.harness.stage_profile import profile_stage
from benchmarks.harness.summary import summarize
from tinyloop.callbacks.loop import Loop
from tinyloop.generators.scheduler import Scheduler
from tinyloop.generators.traps import current_task, sleep
from tinyloop.generators.yieldfrom import YieldFromScheduler

SCHEMA = experiment.SCHEMA
DEPTHS = (1, 5, 20)


# --- the work, written for each scheduler --------------------------------------

def stack_chain(depth):
    """``depth`` nested calls by bare ``yield`` (which makes depth 1 a generator too); the innermost returns 1."""
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


# pyperf's table: every (measure, depth, side) once, named "measure/depth/side".
CELLS = [(name, depth) for name, (_, _, _, by_depth) in MEASURES.items() for depth in (DEPTHS if by_depth else (1,))]
TIMINGS = [pyperf_runs.Timing(f"{name}/{depth}/{side}", time_side, (name, side, depth))
           for name, depth in CELLS for side in ("stack", "yieldfrom", *(("plain",) if name == "call+return" else ()))]


def measure(options):
    """The table's rows, from one pyperf run of TIMINGS with ``options`` (pyperf's)."""
    values = pyperf_runs.run("benchmarks.stack_cost:TIMINGS", [timing.name for timing in TIMINGS], options)
    rows = []
    for name, depth in CELLS:
        stack, yf = (summarize(v * 1e9 for v in values[f"{name}/{depth}/{side}"]) for side in ("stack", "yieldfrom"))
        row = {"measure": name, "what": MEASURES[name][0], "depth": depth, "values": len(values[f"{name}/{depth}/stack"]),
               "stack_ns": stack["median"], "yieldfrom_ns": yf["median"],
               "stack_ns_range": [stack["min"], stack["max"]], "yieldfrom_ns_range": [yf["min"], yf["max"]],
               "noisy": stack["noisy"] or yf["noisy"]}
        if name == "call+return":
            row["plain_ns"] = summarize(v * 1e9 for v in values[f"{name}/{depth}/plain"])["median"]
        rows.append(row)
    return rows


def render(data):
    """The text table, from the JSON alone."""
    s = data["settings"]
    lines = [f"Stack scheduler vs yield from: ns per operation, median (min–max) of pyperf's values "
             f"({s['pyperf']})", ""]
    header = ["operation", "D", "stack", "yield from", "stack / yf", "plain calls"]
    rows = []
    for row in data["rows"]:
        cells = [f"{row[key]:.0f}" + (" ({:.0f}–{:.0f})".format(*row[f"{key}_range"]) if f"{key}_range" in row else "")
                 for key in ("stack_ns", "yieldfrom_ns")]
        rows.append([row["measure"], str(row["depth"]), *cells, f"{row['stack_ns'] / row['yieldfrom_ns']:.1f}x"
                     + (" noisy" if row.get("noisy") else ""),
                     f"{row['plain_ns']:.0f}" if "plain_ns" in row else ""])
    lines += ["  " + line for line in align(header, rows)]
    lines += ["", "  call+return: D generator calls and returns, no trap;  trap: current_task() "
              "answered at once, D generators deep;",
              "  reactor trip: sleep(0), one loop iteration;  plain calls: D nested function calls.",
              "  noisy: a figure's runs differ by more than 25% (the largest over 1.25 times the smallest).",
              f"  {describe_machine(data)}"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = experiment.parser("stack_cost", __doc__, repeat=None, pin=False, aliases=("--json",))
    parser.add_argument("--profile", action="store_true",
                        help="instead: profile the generators and yieldfrom servers under ab -k")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "stack_cost.json")
    if args.profile:
        text = "\n".join(profile_stage(stage, 2000) for stage in ("generators", "yieldfrom"))
        print(text, end="")
        print(f"wrote {output.relative(output.write_text(text, out.with_name('profile_generators.txt')))}")
        return 0
    where = realtime_self()  # one core, no migrations, no preemption by other work
    options = pyperf_runs.QUICK if args.quick else pyperf_runs.DEFAULT
    clock = experiment.Clock()
    data = experiment.document(
        "stack_cost", sys.argv[1:] if argv is None else argv, clock, pinning={"process": where},
        settings={"quick": args.quick, "depths": list(DEPTHS), "pyperf": " ".join(options),
                  "timer": "pyperf bench_time_func, gc off while timed, time.perf_counter"})
    data.update(rows=measure(options), elapsed_s=clock.elapsed())
    data["settings"]["repeat"] = data["rows"][0]["values"]  # pyperf's values per figure, for the caption
    text = render(data)
    experiment.finish(data, out, text, conclusion(data), extra={out.with_suffix(".txt"): text})
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: how many times a hand-kept stack costs yield from, per measure at the deepest depth."""
    deepest = max((row["depth"] for row in data["rows"]), default=None)
    parts = [f"{row['measure']} {row['stack_ns'] / row['yieldfrom_ns']:.1f}×" for row in data["rows"]
             if row["depth"] == deepest and row.get("yieldfrom_ns")]
    return (f"a hand-kept generator stack against yield from, at depth {deepest}: " + ", ".join(parts)) if parts \
        else "stack_cost: nothing measured"


if __name__ == "__main__":
    sys.exit(main())
