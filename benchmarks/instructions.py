# benchmarks/instructions.py
"""The loop micro-benchmarks counted in CPU instructions, under valgrind's callgrind.

    python benchmarks/instructions.py             every loop and operation (about 7 minutes)
    python benchmarks/instructions.py --reference the same, written where the book reads it
    python benchmarks/instructions.py --loops uv,uvloop --ops timer_cancel

benchmarks/micro.py times the same operations in nanoseconds with pyperf.
On a shared two-core machine those times move by a quarter from one run to
the next; an instruction count does not (callgrind counts the instructions
the program executes, whatever else the machine is doing).  It is not a
time: a cache miss costs no more than an add.  But when two loops run the
same Python code around a different core, the difference in instructions per
operation is the difference in work, and it is the same on every run.

Per loop and operation: instructions per operation, from two runs of the
operation under callgrind (N and N + DELTA operations) so that start-up and
import cancel out.  The rows are the loops of benchmarks/peers/echo_server.py's
LOOPS, and one variant: ``uv/timer-per-handle``, tinyloop.uv with a
uv_timer_t per timer (uvloop's design) instead of one over a heap kept in C
(ours) — the comparison chapters/libuv.md makes.

Writes benchmarks/results/local/instructions.json and .md (ignored by git);
``--reference`` writes benchmarks/results/instructions.json and .md.
"""

# Rules this file keeps:
#   * The operations are micro.py's functions, imported; one more,
#     timer_fire, schedules timers that are due at once and runs them.
#   * Only callgrind's total ("Collected") is read; the profile is not
#     written (--callgrind-out-file=/dev/null).
#   * A loop that does not import here, or a machine without valgrind,
#     gives a row that says so instead of a number.

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from benchmarks import micro
from benchmarks.harness.output import RESULTS
from benchmarks.peers.echo_server import LOOPS, loop_factory

__all__ = ["LOOP_NAMES", "OPERATIONS", "count", "main", "render"]

REFERENCE = RESULTS / "instructions.json"
LOCAL = RESULTS / "local" / "instructions.json"
N, DELTA = 1_000, 10_000     # operations in the short and the long run
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
                loop.call_later(0.0, micro._noop)
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
    """The loop factory for a row name; ImportError when the loop is not installed."""
    if name == PER_TIMER:
        from tinyloop.uv.loop import Loop

        class PerTimer(Loop):
            _timers_per_handle = True   # one uv_timer_t per call_later
        return PerTimer
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


def count(loop: str, op: str, pool: concurrent.futures.Executor | None = None) -> float:
    """Instructions per operation: the long run minus the short one, over DELTA.

    Discussion: the two runs may go in parallel (``pool``), and so may
    different rows: a count, unlike a time, does not depend on what else
    runs on the machine.
    """
    if pool is None:
        return (_collected(loop, op, N + DELTA) - _collected(loop, op, N)) / DELTA
    long, short = pool.submit(_collected, loop, op, N + DELTA), pool.submit(_collected, loop, op, N)
    return (long.result() - short.result()) / DELTA


def render(data: dict[str, Any]) -> str:
    """The Markdown table of a result: one row per loop, one column per operation."""
    ops = data["operations"]
    lines = ["| loop | " + " | ".join(f"{op}<br>({OPERATIONS[op][1]})" for op in ops) + " |",
             "|---|" + "---:|" * len(ops)]
    for loop in data["loops"]:
        cells = []
        for op in ops:
            value = data["counts"].get(loop, {}).get(op)
            cells.append(f"{value:,.0f}" if isinstance(value, (int, float)) else str(value))
        lines.append(f"| {loop} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Instructions per operation, counted by callgrind ({data['valgrind']}); "
                 f"CPython {data['python']}; {data['date']}. Fewer is less work; "
                 "not a time (a cache miss counts as one instruction).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", default=",".join(LOOP_NAMES))
    parser.add_argument("--ops", default=",".join(OPERATIONS))
    parser.add_argument("--reference", action="store_true", help="write the book's files")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at once (default 2)")
    parser.add_argument("--worker", nargs=3, metavar=("LOOP", "OP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        loop, op, n = args.worker
        OPERATIONS[op][0](int(n), factory_for(loop))
        return 0
    if shutil.which("valgrind") is None:
        print("instructions.py needs valgrind (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    loops, ops = args.loops.split(","), args.ops.split(",")
    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    data: dict[str, Any] = {"schema": 1, "loops": loops, "operations": ops, "counts": {},
                            "valgrind": version, "python": sys.version.split()[0],
                            "date": datetime.now(timezone.utc).date().isoformat(),
                            "settings": {"n": N, "delta": DELTA}}
    started = time.monotonic()
    for loop in loops:
        row = data["counts"][loop] = {}
        try:
            factory_for(loop)
        except ImportError as error:
            row.update({op: f"not run: {error}".split(". ")[0] for op in ops})
            continue
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for op in ops:
                row[op] = count(loop, op, pool)
                print(f"{loop:22} {op:14} {row[op]:10,.0f} instructions/op", flush=True)
    data["seconds"] = round(time.monotonic() - started)
    out = REFERENCE if args.reference else LOCAL
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(data))
    print(render(data))
    print(f"wrote {out} and {out.with_suffix('.md')} in {data['seconds']} s")
    print(conclusion(data))
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: per operation, the loop that runs it in the fewest instructions."""
    parts = []
    for op in data["operations"]:
        counted = {loop: row[op] for loop, row in data["counts"].items() if isinstance(row.get(op), (int, float))}
        if counted:
            best = min(counted, key=counted.get)
            parts.append(f"{op} {best} {counted[best]:,.0f}")
    return ("fewest instructions per operation: " + ", ".join(parts)) if parts else "instructions: nothing counted"


if __name__ == "__main__":
    sys.exit(main())
