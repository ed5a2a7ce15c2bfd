# benchmarks/instructions.py
"""The loop micro-benchmarks counted in CPU instructions, under valgrind's callgrind.

    python -m benchmarks.instructions              every loop and operation (about 7 minutes)
    python -m benchmarks.instructions --quick      a smoke run: asyncio and aio, call_soon, few operations
    python -m benchmarks.instructions --loops uv,uvloop --ops timer_cancel

benchmarks/micro.py times these operations (its functions, and timer_fire)
with pyperf; on a shared two-core machine those times move by a quarter
between runs, and an instruction count does not.  It is not a time (a cache
miss counts as one instruction), but where two loops run the same Python
around a different core, the difference in instructions is the difference
in work.  Per loop and operation: callgrind's total ("Collected"; no
profile written) for N and N + DELTA operations, the difference over DELTA,
so start-up and import cancel out.  The rows are benchmarks/peers/echo_server.py's
LOOPS and ``uv/timer-per-handle``, tinyloop.uv with a uv_timer_t per timer
(uvloop's design; benchmarks/uv_variants.py) instead of one heap in C.  A
loop that does not import, or no valgrind, gives a row that says so.
Writes instructions.json and .md by the harness's output rule.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import micro, uv_variants
from benchmarks.harness import experiment, output
from benchmarks.harness.machine import version_line
from benchmarks.harness.process import choose_names
from benchmarks.harness.render import markdown
from benchmarks.peers.echo_server import LOOPS, loop_factory

__all__ = ["LOOP_NAMES", "OPERATIONS", "count", "main", "render"]

SIZES = {"full": (1_000, 10_000), "quick": (100, 1_000)}  # operations in the short run, and how many more in the long
QUICK = {"loops": ["asyncio", "aio"], "ops": ["call_soon"]}
PER_TIMER = "uv/timer-per-handle"
LOOP_NAMES = (*LOOPS, PER_TIMER)


def time_timer_fire(loops: int, factory: Callable[[], Any]) -> float:
    """``loops`` timers due at once (call_later(0)), run by run_forever in batches."""
    loop = factory()
    try:
        started = time.perf_counter()
        left = loops
        while left:
            n = min(left, micro.BATCH)
            left -= n
            for _ in range(n):
                loop.call_later(0.0, micro.noop)
            loop.call_later(0.0, loop.stop)
            loop.run_forever()
        return time.perf_counter() - started
    finally:
        loop.close()


OPERATIONS: dict[str, tuple[Callable[[int, Callable[[], Any]], float], str]] = {
    **{name: (function, what) for name, (function, what, _) in micro.OPERATIONS.items()},
    "timer_fire": (time_timer_fire, "call_later(0) + run the timer"),
}


def factory_for(name: str) -> Callable[[], Any]:
    """The loop factory for a row name; ImportError when the loop is not installed.

    ``uv/timer-per-handle`` loads the variant's build of tinyloop.uv in this
    process (benchmarks.uv_variants.use): only before tinyloop.uv is imported.
    """
    if name == PER_TIMER:
        uv_variants.use("timer-per-handle")
        return loop_factory("uv")
    return loop_factory(name)


def _collected(loop: str, op: str, n: int) -> int:
    """Instructions callgrind counted for a whole run of ``n`` operations."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, "-m", "benchmarks.instructions", "--worker", loop, op, str(n)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600)
    for line in out.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"no count from callgrind for {loop} {op}: {out.stderr[-500:]}")


def count(loop: str, op: str, pool: concurrent.futures.Executor, n: int, delta: int) -> float:
    """Instructions per operation: the run of ``n + delta`` minus the run of ``n``, over ``delta``.

    Discussion: the two runs go in parallel (``pool``), and so may
    different rows: a count, unlike a time, does not depend on what else
    runs on the machine.
    """
    long, short = pool.submit(_collected, loop, op, n + delta), pool.submit(_collected, loop, op, n)
    return (long.result() - short.result()) / delta


def render(data: dict[str, Any]) -> str:
    """The Markdown table of a result: one row per loop, one column per operation."""
    ops = data["operations"]
    rows = [[loop, *(f"{value:,.0f}" if isinstance(value, (int, float)) else str(value)
                     for value in (data["counts"].get(loop, {}).get(op) for op in ops))] for loop in data["loops"]]
    return "\n".join([*markdown(["loop", *(f"{op}<br>({OPERATIONS[op][1]})" for op in ops)], rows), "",
                      f"Instructions per operation, counted by callgrind ({data['valgrind']}); "
                      f"CPython {data['python']}; {data['date'][:10]}. Fewer is less work; "
                      "not a time (a cache miss counts as one instruction)."]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: per operation, the loop that runs it in the fewest instructions."""
    parts = []
    for op in data["operations"]:
        counted = {loop: row[op] for loop, row in data["counts"].items() if isinstance(row.get(op), (int, float))}
        if counted:
            best = min(counted, key=counted.get)
            parts.append(f"{op} {best} {counted[best]:,.0f}")
    return ("fewest instructions per operation: " + ", ".join(parts)) if parts else "instructions: nothing counted"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = experiment.parser("instructions", __doc__, repeat=None, pin=False)
    parser.add_argument("--loops", help=f"comma list (default all: {', '.join(LOOP_NAMES)})")
    parser.add_argument("--ops", help=f"comma list (default all: {', '.join(OPERATIONS)})")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at once (default 2)")
    parser.add_argument("--worker", nargs=3, metavar=("LOOP", "OP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        loop, op, n = args.worker
        OPERATIONS[op][0](int(n), factory_for(loop))
        return 0
    out = output.json_path(parser, args, "instructions.json")
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.instructions needs valgrind (Debian: apt-get install valgrind)")
    loops = choose_names(args.loops, list(LOOP_NAMES), "loop", QUICK["loops"] if args.quick else list(LOOP_NAMES))
    ops = choose_names(args.ops, list(OPERATIONS), "operation", QUICK["ops"] if args.quick else list(OPERATIONS))
    n, delta = SIZES["quick" if args.quick else "full"]
    clock = experiment.Clock()
    counts: dict[str, dict[str, Any]] = {}
    for loop in loops:
        row = counts[loop] = {}
        try:
            uv_variants.build("timer-per-handle") if loop == PER_TIMER else factory_for(loop)
        except (ImportError, RuntimeError) as error:
            row.update({op: f"not run: {error}".split(". ")[0] for op in ops})
            continue
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for op in ops:
                row[op] = count(loop, op, pool, n, delta)
                print(f"{loop:22} {op:14} {row[op]:10,.0f} instructions/op", flush=True)
    data = experiment.document("instructions", argv, clock, settings={"quick": args.quick, "n": n, "delta": delta},
                               tools={"valgrind": version_line(["valgrind", "--version"])})
    data.update(loops=loops, operations=ops, counts=counts, valgrind=data["tools"]["valgrind"],
                python=sys.version.split()[0], elapsed_s=clock.elapsed())
    text = render(data)
    experiment.finish(data, out, text, conclusion(data), extra={out.with_suffix(".md"): text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
