# benchmarks/instructions.py
"""The loop micro-benchmarks counted in CPU instructions, under valgrind's callgrind.

    python -m benchmarks.instructions              every loop and operation (about 7 minutes)
    python -m benchmarks.instructions --quick      a smoke run: asyncio and aio, call_soon, few operations

Why a count and not a time: benchmarks/README.md, Part IV.  Per loop and
operation: callgrind's total ("Collected"; no profile written) for N and
N + DELTA operations, the difference over DELTA, so start-up and imports
cancel out.  The rows are benchmarks/peers/echo_server.py's LOOPS and
``uv/timer-per-handle`` (benchmarks/uv_variants.py); a loop that does not
import gives a row that says so.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import micro, uv_variants
from benchmarks.harness import callgrind, experiment, output
from benchmarks.harness.machine import version_line
from benchmarks.harness.render import markdown
from benchmarks.peers.echo_server import LOOPS, loop_factory

__all__ = ["LOOP_NAMES", "OPERATIONS", "count", "main", "render"]

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
    ``uv/timer-per-handle`` loads the variant's build in this process (uv_variants.use):
    only before tinyloop.uv is imported."""
    if name == PER_TIMER:
        uv_variants.use("timer-per-handle")
        return loop_factory("uv")
    return loop_factory(name)


def count(loop: str, ops: list[str], n: int, delta: int) -> dict[str, float | str]:
    """``{op: instructions per operation}`` for ``loop`` (harness.callgrind.per_operation, ``n``
    and ``delta``); each op ``"not run: why"`` when the loop does not load."""
    try:
        uv_variants.build("timer-per-handle") if loop == PER_TIMER else factory_for(loop)
    except (ImportError, RuntimeError) as error:
        return dict.fromkeys(ops, f"not run: {error}".split(". ")[0])
    row: dict[str, float | str] = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for op in ops:
            worker = [sys.executable, "-m", "benchmarks.instructions", "--worker", loop, op]
            counted = callgrind.per_operation(pool, lambda size: callgrind.collected([*worker, str(size)]),
                                              n, delta)
            row[op] = counted()  # this op's two runs end before the next op's start
            print(f"{loop:22} {op:14} {row[op]:10,.0f} instructions/op", flush=True)
    return row


def render(data: dict[str, Any]) -> str:
    """The Markdown table of a result: one row per loop, one column per operation."""
    ops = data["operations"]
    rows = [[loop, *(f"{value:,.0f}" if isinstance(value, (int, float)) else str(value)
                     for value in (data["counts"].get(loop, {}).get(op) for op in ops))]
            for loop in data["loops"]]
    return "\n".join([*markdown(["loop", *(f"{op}<br>({OPERATIONS[op][1]})" for op in ops)], rows), "",
                      f"Instructions per operation, counted by callgrind ({data['valgrind']}); "
                      f"CPython {data['python']}; {data['date'][:10]}. Fewer is less work; "
                      "not a time (a cache miss counts as one instruction)."]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: per operation, the loop that runs it in the fewest instructions."""
    parts = []
    for op in data["operations"]:
        counted = {loop: row[op] for loop, row in data["counts"].items() if not isinstance(row[op], str)}
        if counted:
            best = min(counted, key=counted.__getitem__)
            parts.append(f"{op} {best} {counted[best]:,.0f}")
    return experiment.sentence("fewest instructions per operation", parts)


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("instructions", __doc__, repeat=None, pin=False)
    parser.add_argument("--worker", nargs=3, metavar=("LOOP", "OP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # one run under callgrind
        loop, op, n = args.worker
        OPERATIONS[op][0](int(n), factory_for(loop))
        return 0
    out = output.json_path(parser, args, "instructions.json")
    experiment.require("instructions", "valgrind")
    loops, ops = (["asyncio", "aio"], ["call_soon"]) if args.quick else (list(LOOP_NAMES), list(OPERATIONS))
    n, delta = (100, 1_000) if args.quick else (1_000, 10_000)  # operations in the short run, more in the long
    clock = experiment.Clock()
    counts = {loop: count(loop, ops, n, delta) for loop in loops}
    valgrind = version_line(["valgrind", "--version"])
    data = experiment.document("instructions", argv, clock, settings={"quick": args.quick, "n": n,
                                                                      "delta": delta},
                               tools={"valgrind": valgrind}, loops=loops, operations=ops, counts=counts,
                               valgrind=valgrind, python=sys.version.split()[0])
    return experiment.conclude(data, out, clock, render, conclusion, ".md")


if __name__ == "__main__":
    sys.exit(main())
