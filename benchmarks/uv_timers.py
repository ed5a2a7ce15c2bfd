# benchmarks/uv_timers.py
"""The timer heap in C behind one uv_timer_t, against one uv_timer_t per timer.

    python benchmarks/uv_timers.py                 5 interleaved repetitions, local results
    python benchmarks/uv_timers.py --quick         1 repetition of fewer operations (plumbing)
    python benchmarks/uv_timers.py --reference     writes benchmarks/results/uv_timers.json and .md

tinyloop.uv keeps its timers in a heap of C structs behind one libuv timer
(tinyloop/uv/timers.pyx); uvloop, and the simplest port, give each
``call_later`` a ``uv_timer_t`` of its own in libuv's heap.  Both designs
are in the same build: ``Loop._timers_per_handle`` switches to the second,
and this script turns it on in a subclass (the book's "override one
attribute" pattern), so the two rows differ in nothing else.

The operations are benchmarks/micro.py's, imported, not copied:

    timer_cancel  call_later(3600, ...) and cancel it at once; the loop then
                  runs, dropping the cancelled timer (a request's timeout
                  that the response beat: the common case)
    timer_fire    (this file's) call_later(0, ...) that fires: the timers
                  are due at once, so the figure is the cost of scheduling,
                  firing and running one, not of waiting

Figure: ns of wall time per operation, median of interleaved repetitions
(min-max), the process pinned to one CPU when it can be.  Written as JSON
and as a Markdown table beside it; the libuv chapter includes the table.
"""

# Rules this file keeps:
#
#   * The measured code is the extension's, unchanged: the one switch it
#     reads is a class attribute of tinyloop.uv.Loop, set in a subclass.
#   * Repetitions interleave the two designs, so a slow minute of a shared
#     machine falls on both; the table shows the spread beside the median.
#   * Only --reference writes where the book reads; the default writes
#     under benchmarks/results/local/ (ignored by git).

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make ``benchmarks`` and ``tinyloop`` importable

from benchmarks import aio_changes, micro  # noqa: E402
from benchmarks import run as harness  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
REFERENCE = RESULTS / "uv_timers.json"              # the book's; only --reference writes it
LOCAL = RESULTS / "local" / "uv_timers.json"
BATCH = 1000                                        # timers scheduled between two runs of the loop


def designs() -> dict[str, tuple[str, Callable[[], Any]]]:
    """name -> (what it is, loop factory); raises ImportError if tinyloop.uv is not built."""
    from tinyloop.uv import Loop

    class PerTimerLoop(Loop):
        """tinyloop.uv with one uv_timer_t per call_later (uvloop's design)."""

        _timers_per_handle = True

    return {"heap": ("one uv_timer_t over a heap of C structs (tinyloop.uv)", Loop),
            "per-timer": ("one uv_timer_t per timer, in libuv's heap (uvloop's design)",
                          PerTimerLoop)}


def time_timer_fire(loops: int, factory: Callable[[], Any]) -> float:
    """``loops`` timers due at once (call_later(0)), in batches, each batch run to the end."""
    loop = factory()
    try:
        started = time.perf_counter()
        left = loops
        while left:
            n = min(left, BATCH)
            left -= n
            for _ in range(n - 1):
                loop.call_later(0, micro._noop)
            loop.call_later(0, loop.stop)  # the batch's last timer; due after the others
            loop.run_forever()
        return time.perf_counter() - started
    finally:
        loop.close()


OPERATIONS: dict[str, tuple[Callable[[int, Callable[[], Any]], float], str]] = {
    "timer_cancel": (micro.time_timer_cancel, "call_later(3600) + cancel one timer"),
    "timer_fire": (time_timer_fire, "call_later(0), fire and run one timer"),
}


def measure(repeat: int, ops: int, cpu: int | None) -> list[dict]:
    """Each operation on each design, ``repeat`` times interleaved, ``ops`` operations each;
    one row per operation with the spread of ns per operation for both designs."""
    chosen = designs()
    previous = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpu is not None and previous is not None:
        os.sched_setaffinity(0, {cpu})
    samples: dict[tuple[str, str], list[float]] = {}
    try:
        for rep in range(repeat):
            for op, (timed, _) in OPERATIONS.items():
                for name, (_, factory) in chosen.items():
                    samples.setdefault((op, name), []).append(timed(ops, factory) / ops * 1e9)
            print(f"  repetition {rep + 1}/{repeat} done", file=sys.stderr, flush=True)
    finally:
        if cpu is not None and previous is not None:
            os.sched_setaffinity(0, previous)
    rows = []
    for op, (_, what) in OPERATIONS.items():
        row: dict[str, Any] = {"op": op, "what": what, "unit": "ns"}
        for name in chosen:
            row[name] = {**aio_changes._spread(samples[op, name]), "samples": samples[op, name]}
        row["speedup"] = row["per-timer"]["median"] / row["heap"]["median"]
        rows.append(row)
    return rows


def render(data: dict) -> str:
    """The Markdown table the chapter includes, from ``data`` (this script's JSON)."""
    out = ["<!-- generated by python benchmarks/uv_timers.py from uv_timers.json; do not edit -->", ""]
    if data["quick"]:
        out += ["*A `--quick` plumbing run: too short and too few to compare by. The book's "
                "figures come from the full run (`--reference`).*", ""]
    names = data["designs"]
    out += [f"ns of wall time per operation: median of {data['repeat']} interleaved repetitions "
            f"(min–max), {data['ops']:,} operations each.", ""]
    header = ["operation", *(f"`{name}`: {what}" for name, what in names.items()),
              "heap's speed-up"]
    out += ["| " + " | ".join(header) + " |",
            "| " + " | ".join(["---"] + ["--:"] * (len(header) - 1)) + " |"]
    for row in data["rows"]:
        cells = [row["what"]]
        for name in names:
            spread = row[name]
            cells.append(f"{spread['median']:.0f} ({spread['min']:.0f}–{spread['max']:.0f})")
        cells.append(f"×{row['speedup']:.2f}")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", f"`{data['command']}`; {data['machine_line']}; load average "
            f"{data['load_start']:.2f} at the start, {data['load_end']:.2f} at the end.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition of 20,000 operations")
    parser.add_argument("--reference", action="store_true",
                        help="write benchmarks/results/uv_timers.json and .md (the book's)")
    parser.add_argument("--repeat", type=int, help="interleaved repetitions (default 5; 1 quick)")
    parser.add_argument("--ops", type=int, help="operations per measurement (default 200,000)")
    parser.add_argument("--cpu", type=int, default=0,
                        help="pin the process to this CPU (default 0; -1: do not pin)")
    parser.add_argument("--out", type=Path, help="the JSON to write (default: local results)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 5)
    ops = args.ops or (20_000 if args.quick else 200_000)
    try:
        chosen = designs()
    except ImportError as error:
        print(f"uv_timers: {error}", file=sys.stderr)
        return 2
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    rows = measure(repeat, ops, None if args.cpu < 0 else args.cpu)
    machine = harness.fingerprint()
    data = {
        "command": "python benchmarks/uv_timers.py" + "".join(
            f" {a}" for a in (argv if argv is not None else sys.argv[1:])),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick, "repeat": repeat, "ops": ops,
        "designs": {name: what for name, (what, _) in chosen.items()},
        "rows": rows,
        "elapsed_s": time.monotonic() - started,
        "machine": machine,
        "machine_line": f"{machine['cpu_model']}, {machine['cpus']} CPUs, {machine['python']}, "
                        f"Linux {machine['kernel']}",
        "load_start": load_start, "load_end": os.getloadavg()[0],
    }
    aio_changes.write_results(data, args.out or (REFERENCE if args.reference else LOCAL),
                              render(data), ".md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
