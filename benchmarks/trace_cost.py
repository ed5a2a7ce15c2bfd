# benchmarks/trace_cost.py
"""What do the instrument hooks cost, off and on, on tinyloop.aio and tinyloop.uv?

    python benchmarks/trace_cost.py                the table, on standard output
    python benchmarks/trace_cost.py --quick        fewer operations, for a look
    python benchmarks/trace_cost.py --out FILE     the JSON elsewhere (default: benchmarks/results/local/)

Two workloads, in-process, on 127.0.0.1 only:

    callbacks   a chain of call_soon callbacks, each scheduling the next: the
                loop's hot path per callback (run_once's helpers, _run_handle)
    echo        a TCP ping-pong of small messages between two protocols on
                one loop: a read and a write per message on each side, the
                transports' hook sites included

each on every variant of each loop, as CPU time (time.process_time) per
operation in microseconds, the median of --repeat runs, the variants
interleaved run by run so machine drift spreads over all:

    no hooks    (aio only) a subclass whose iteration helpers are Part II's
                without their hook sites: the baseline the issue's "<= 2 %
                when off" is measured against.  uv has no such row: a uv
                without hook sites is another build of the extension.
    off         the loop as shipped, no instrument installed
    no-op       an instrument with every hook, each doing nothing: the cost
                of the dispatch alone
    recorder    tinyloop.trace's Recorder, the flight recorder

Rules this file keeps:
  * The workloads are the same for every variant; only the loop differs.
  * The JSON holds every figure the table shows and how it was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import platform
import selectors
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make ``tinyloop`` importable

from tinyloop import stages  # noqa: E402
from tinyloop.aio.unix_events import SelectorEventLoop  # noqa: E402
from tinyloop.callbacks import loop as reactor  # noqa: E402
from tinyloop.trace.instrument import HOOKS  # noqa: E402
from tinyloop.trace.recorder import Recorder  # noqa: E402

SCHEMA = "tinyloop-trace-cost/1"
VARIANTS = ("no hooks", "off", "no-op", "recorder")
MESSAGE = b"x" * 64


class NoHookSites(SelectorEventLoop):
    """tinyloop.aio with Part II's iteration helpers as they were before the hook sites.

    A copy, for this measurement only: the four helpers of run_once and
    _run_handle without their ``self._instrument`` tests.
    """

    def _compute_timeout(self) -> float | None:
        self._clean_timer_heap()
        if self._ready or self._stopping:
            return 0
        if not self._scheduled:
            return None
        delay = self._scheduled[0]._when - self.time()
        return min(max(0.0, delay), reactor.MAXIMUM_SELECT_TIMEOUT)

    def _process_events(self, events: list[Any]) -> None:
        for key, mask in events:
            read, write = key.data
            if mask & selectors.EVENT_READ and read is not None:
                self._ready.append(read)
            if mask & selectors.EVENT_WRITE and write is not None:
                self._ready.append(write)

    def _move_due_timers(self) -> None:
        end = self.time() + reactor.CLOCK_RESOLUTION
        heap = self._scheduled
        while heap and heap[0]._when <= end:
            timer = heapq.heappop(heap)
            timer._in_heap = False
            if timer._cancelled:
                self._cancelled_timers -= 1
            else:
                self._ready.append(timer)

    def _run_handle(self, handle: Any) -> None:
        handle._run()


class NoOp:
    """An instrument with every hook, each doing nothing."""


for _hook in HOOKS:
    setattr(NoOp, _hook, lambda self, *args: None)


def make_loop(loop_name: str, variant: str) -> asyncio.AbstractEventLoop:
    """A new loop of ``loop_name`` ("aio" or "uv") set up as ``variant``."""
    if loop_name == "uv":
        from tinyloop.uv import new_event_loop
        loop = new_event_loop()
    else:
        loop = NoHookSites() if variant == "no hooks" else SelectorEventLoop()
    if variant == "no-op":
        loop.add_instrument(NoOp())
    elif variant == "recorder":
        loop.add_instrument(Recorder(loop.time))
    return loop


def callbacks(loop: asyncio.AbstractEventLoop, number: int) -> None:
    """``number`` callbacks, each scheduling the next."""
    left = number

    def step() -> None:
        nonlocal left
        left -= 1
        if left:
            loop.call_soon(step)
        else:
            loop.stop()

    loop.call_soon(step)
    loop.run_forever()


class _PingPong(asyncio.Protocol):
    def __init__(self, done: asyncio.Future | None, number: int) -> None:
        self.done, self.left = done, number

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.done is not None:  # the client serves first
            transport.write(MESSAGE)

    def data_received(self, data: bytes) -> None:
        if self.done is None:
            self.transport.write(data)  # the server echoes
            return
        self.left -= 1
        if self.left:
            self.transport.write(MESSAGE)
        elif not self.done.done():
            self.done.set_result(None)


def echo(loop: asyncio.AbstractEventLoop, number: int) -> None:
    """``number`` round trips of a 64-byte message over TCP on 127.0.0.1."""

    async def main() -> None:
        server = await loop.create_server(lambda: _PingPong(None, 0), "127.0.0.1", 0)
        done = loop.create_future()
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(lambda: _PingPong(done, number), "127.0.0.1", port)
        await done
        transport.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())


WORKLOADS: dict[str, Callable[[asyncio.AbstractEventLoop, int], None]] = {
    "callbacks": callbacks, "echo": echo}


def measure(loop_name: str, variant: str, workload: str, number: int) -> float:
    """CPU microseconds per operation of one run."""
    loop = make_loop(loop_name, variant)
    try:
        start = time.process_time()
        WORKLOADS[workload](loop, number)
        return (time.process_time() - start) / number * 1e6
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations and repeats")
    parser.add_argument("--repeat", type=int, default=9, help="runs per figure (median)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "local" / "trace_cost.json")
    args = parser.parse_args(argv)
    numbers = {"callbacks": 2_000 if args.quick else 200_000, "echo": 200 if args.quick else 20_000}
    repeat = 3 if args.quick else args.repeat
    loops = ["aio"] + ([] if stages.get("uv").unavailable() else ["uv"])
    runs: dict[str, list[float]] = {}
    for _ in range(repeat):
        for workload in WORKLOADS:
            for loop_name in loops:
                for variant in VARIANTS:
                    if loop_name == "uv" and variant == "no hooks":
                        continue
                    key = f"{loop_name}/{workload}/{variant}"
                    runs.setdefault(key, []).append(measure(loop_name, variant, workload, numbers[workload]))
    medians = {key: statistics.median(values) for key, values in runs.items()}
    rows = []
    for key, value in medians.items():
        loop_name, workload, _ = key.split("/")
        base = medians.get(f"{loop_name}/{workload}/no hooks") or medians[f"{loop_name}/{workload}/off"]
        rows.append({"figure": key, "cpu_us_per_op": round(value, 4),
                     "vs_baseline": round(value / base - 1, 4)})
    result = {"schema": SCHEMA, "python": platform.python_version(), "machine": platform.machine(),
              "numbers": numbers, "repeat": repeat, "quick": args.quick, "rows": rows, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'figure':<32} {'CPU µs/op':>10} {'vs baseline':>12}")
    for row in rows:
        print(f"{row['figure']:<32} {row['cpu_us_per_op']:>10.3f} {row['vs_baseline']:>+12.1%}")
    print(f"(baseline: aio's 'no hooks' row, uv's 'off' row; JSON in {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
