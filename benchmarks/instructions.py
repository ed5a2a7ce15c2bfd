# benchmarks/instructions.py
"""The loop micro-benchmarks counted in CPU instructions, under valgrind's callgrind.

    python -m benchmarks.instructions              every loop and operation (about 7 minutes)
    python -m benchmarks.instructions --quick      a smoke run: asyncio and aio, call_soon, few operations
    python -m benchmarks.instructions --requests close,echo-1k --loops uv,uvloop
                                                   the server's instructions per request under a load
    python -m benchmarks.instructions --requests all --reference
                                                   every load and loop (about 40 minutes), written to
                                                   benchmarks/results/instructions_requests.json
    python -m benchmarks.instructions --requests all --loops ring --out FILE
    python -m benchmarks.instructions --merge FILE --why "what changed"
                                                   one loop that changed, counted again on every load
                                                   and put into that file (its `added` says so)

Why a count and not a time: benchmarks/README.md, Part IV.  Per loop and
operation: callgrind's total ("Collected"; no profile written) for N and
N + DELTA operations, the difference over DELTA, so start-up and imports
cancel out.  The rows are benchmarks/peers/echo_server.py's LOOPS,
``uv/timer-per-handle`` (benchmarks/uv_variants.py), and tinyloop.ring on
each core (``ring``: Cython on liburing, ``ring/python``: ctypes;
tinyloop/ring/core.py); a loop that does not import gives a row that says so.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import micro, uv_variants
from benchmarks.harness import callgrind, experiment, output
from benchmarks.harness.machine import version_line
from benchmarks.harness.render import markdown
from benchmarks.peers import asyncio_server, echo_server
from benchmarks.peers.echo_server import LOOPS, loop_factory
from tinyloop.testing import recv_response

__all__ = ["LOOP_NAMES", "OPERATIONS", "count", "main", "render"]

PER_TIMER = "uv/timer-per-handle"
RING_CORES = {"ring": "cython", "ring/python": "python"}  # row -> tinyloop.ring's core
LOOP_NAMES = tuple(dict.fromkeys((*LOOPS, PER_TIMER, *RING_CORES)))  # ring is in LOOPS too: one row


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
    if name in RING_CORES:
        from tinyloop.ring import core, new_event_loop  # ImportError where io_uring is refused
        core.proactor_type(RING_CORES[name])  # RuntimeError where the Cython core is not built
        return functools.partial(new_event_loop, core=RING_CORES[name])
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


# -- Per request: a server's instructions under a load -----------------------------------------
#
# The server is benchmarks/peers' HTTP program (the aio stages' HTTPProtocol or streams handler) or
# echo program, on one loop, under callgrind; this process is its client, one request at a time, and
# is not counted.  A load's figure is (count(N + DELTA) - count(N)) / DELTA, as above.

PIPELINE_DEPTH = 24
# After SIGTERM, how often and how many times a connection wakes a server that valgrind keeps
# waiting (count_requests).
POKE_EVERY, POKES = 2.0, 30
# Load -> (server program, API, what one request is, N, DELTA).
REQUEST_LOADS: dict[str, tuple[str, str, str, int, int]] = {
    "close": ("http", "protocol", "GET / HTTP/1.0 on a new connection (ab without -k)", 100, 500),
    "close-streams": ("http", "streams", "the same, asyncio streams", 100, 500),
    "keepalive": ("http", "protocol", "GET / on one keep-alive connection", 200, 1_000),
    "keepalive-streams": ("http", "streams", "the same, asyncio streams", 200, 1_000),
    "pipeline": ("http", "protocol", f"GET /, {PIPELINE_DEPTH} per write", 480, 2_400),
    **{f"echo-{k}k{suffix}": ("echo", api, f"{k} KiB echoed on one connection{', streams' if suffix else ''}",
                              *((50, 200) if k == 100 else (200, 1_000)))
       for k in (1, 10, 100) for suffix, api in (("", "protocol"), ("-streams", "streams"))},
}


# ``floor``: no loop and no socket, the HTTP layer alone (tinyloop.http) on the bytes one request
# brings: what every loop runs for an HTTP request whatever it does itself (echo: nothing).
FLOOR = "floor"
REQUEST_LOOPS = (FLOOR, "asyncio", "uvloop", "rloop", "aio", "uv", "ring", "ring/python")
RIVALS = {"uv": ("uvloop", "rloop"), "aio": ("asyncio",), "ring": ("uv",)}  # the issues' comparisons


def serve_for_count(loop: str, program: str, api: str) -> None:
    """In the process callgrind counts: serve on a free port until SIGTERM (the announce line says which)."""
    if program == "http":
        serving = asyncio_server.serve(f"{loop}-{api}", api, 0)
    else:
        serving = echo_server.serve(f"echo-{loop}-{api}", api, 0)
    with asyncio.Runner(loop_factory=factory_for(loop)) as runner:
        runner.run(serving)


def load_requests(port: int, load: str, number: int, timeout: float = 60.0) -> None:
    """``number`` requests of ``load`` on 127.0.0.1:``port``, one at a time; RuntimeError on a wrong answer."""
    address, (program, _, _, _, _) = ("127.0.0.1", port), REQUEST_LOADS[load]
    if load.startswith("close"):
        for _ in range(number):
            with socket.create_connection(address, timeout=timeout) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\nHost: instructions\r\n\r\n")
                answer = b"".join(iter(lambda: sock.recv(65536), b""))   # until the server closes
                if not answer.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"GET / answered {answer[:40]!r}")
        return
    with socket.create_connection(address, timeout=timeout) as sock:
        if program == "echo":
            size = int(load.split("-")[1][:-1]) * 1024
            message, buffer = b"x" * size, bytearray(size)
            for _ in range(number):
                sock.sendall(message)
                view, got = memoryview(buffer), 0
                while got < size:
                    n = sock.recv_into(view[got:])
                    if not n:
                        raise RuntimeError("the echo server closed the connection")
                    got += n
            return
        depth = PIPELINE_DEPTH if load == "pipeline" else 1
        buffer = bytearray()
        for _ in range(number // depth):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: instructions\r\n\r\n" * depth)
            for _ in range(depth):
                status, _, _ = recv_response(sock, buffer)
                if status != 200:
                    raise RuntimeError(f"GET / answered {status}")


def http_layer_alone(load: str, number: int) -> None:
    """``number`` requests of the HTTP ``load`` through tinyloop.http.HTTPConnection, with no loop
    and no socket: the bytes the server would receive in, the answer out (RuntimeError if wrong)."""
    from tinyloop.http import HTTPConnection
    if load.startswith("close"):  # a new connection per request, HTTP/1.0
        for _ in range(number):
            answer = HTTPConnection().receive_data(b"GET / HTTP/1.0\r\nHost: instructions\r\n\r\n")
            if not answer.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"GET / answered {answer[:40]!r}")
        return
    depth = PIPELINE_DEPTH if load == "pipeline" else 1
    http, request = HTTPConnection(), b"GET / HTTP/1.1\r\nHost: instructions\r\n\r\n" * depth
    answer = http.receive_data(request)  # checked once: a check per request would be counted too
    if answer.count(b"HTTP/1.1 200") != depth:
        raise RuntimeError(f"GET / answered {answer[:40]!r}")
    for _ in range(number // depth - 1):
        http.receive_data(request)


def count_requests(loop: str, load: str, number: int) -> int:
    """Instructions callgrind counts in the server of ``loop`` serving ``number`` requests of ``load``
    (``floor``: in :func:`http_layer_alone`)."""
    program, api = REQUEST_LOADS[load][:2]
    if loop == FLOOR:
        return callgrind.collected([sys.executable, "-m", "benchmarks.instructions", "--floor", load,
                                    str(number)], env={**os.environ, "PYTHONHASHSEED": "0"})

    def drive(process: subprocess.Popen) -> None:
        line = process.stdout.readline()
        if " on http://" not in line:
            raise RuntimeError(f"the server did not announce its port: {line!r}")
        port = int(line.rsplit(":", 1)[1].strip(" /\n"))
        try:
            load_requests(port, load, number)
        finally:
            process.send_signal(signal.SIGTERM)
            # valgrind (3.19) holds a signal back while io_uring_enter(2) waits (it does not treat
            # the call as blocking), so a ring server hears SIGTERM only when a completion ends its
            # wait: a connection gives it one.  Valgrind hands the signal over at its next check,
            # which a short path from that completion to the next wait can miss: so a connection
            # again each POKE_EVERY seconds until the server is gone (almost always one, in both
            # runs, so it cancels out).
            for _ in range(POKES):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
                    pass
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(POKE_EVERY)
                    break

    return callgrind.collected([sys.executable, "-m", "benchmarks.instructions", "--serve", loop, program, api],
                               env={**os.environ, "PYTHONHASHSEED": "0"}, during=drive)


def per_request(loops: list[str], loads: list[str]) -> dict[str, dict[str, float | str]]:
    """``{loop: {load: instructions per request}}``, or ``"not counted: why"`` for a cell."""
    counts: dict[str, dict[str, float | str]] = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for load in loads:
            n, delta = REQUEST_LOADS[load][3:]
            for loop in loops:
                if loop == FLOOR and REQUEST_LOADS[load][0] != "http":
                    counts.setdefault(loop, {})[load] = "—"  # an echo server runs no layer of its own
                    continue
                figure = callgrind.per_operation(pool, lambda size, loop=loop: count_requests(loop, load, size),
                                                 n, delta)
                try:
                    counts.setdefault(loop, {})[load] = value = figure()
                    print(f"{load:18} {loop:8} {value:12,.0f} instructions/request", flush=True)
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
                    counts.setdefault(loop, {})[load] = f"not counted: {str(error)[:200]}"
                    print(f"{load:18} {loop:8} {counts[loop][load]}", flush=True)
    return counts


def render_requests(data: dict[str, Any]) -> str:
    """The Markdown tables of a per-request result.  First, one row per load and one column per
    loop: the instructions per request, and in brackets each loop over its rival (``RIVALS``: uv
    over the better of uvloop and rloop, aio over asyncio, ring over uv).  Then, for the HTTP loads,
    the same less the ``floor`` (the HTTP layer alone): the loop's own instructions, and the lowest
    ratio of totals a loop could reach against its rival if its own cost nothing."""
    loops, counts = data["loops"], data["counts"]
    derived = derive(data)

    def cell(table: dict[str, dict[str, Any]], loop: str, load: str) -> str:
        # ``table``: the counts, or derive()'s ``own``; a loop over the best of its rivals in it.
        value = table.get(loop, {}).get(load)
        if not isinstance(value, (int, float)):
            return str(counts.get(loop, {}).get(load, "—"))
        rivals = [figure for name in RIVALS.get(loop, ())
                  if isinstance(figure := table.get(name, {}).get(load), (int, float))]
        return f"{value:,.0f}" + (f" ({value / min(rivals):.2f}×)" if rivals and min(rivals) else "")

    shown = [loop for loop in loops if loop != FLOOR]
    rows = [[load, *(cell(counts, loop, load) for loop in shown)] for load in data["loads"]]
    lines = [*markdown(["load", *shown], rows), "",
             "Instructions the server runs per request, counted by callgrind "
             f"({data['valgrind']}); CPython {data['python']}; {data['date'][:10]}. In brackets: uv over "
             "the better of uvloop and rloop, aio over asyncio, ring over uv. User space only: the "
             "kernel's work for the system calls is not in it (benchmarks/results/syscalls.md counts "
             "those). Two runs of the same count differ by up to about 1% of it (the interpreter's "
             "caches and allocations are not the same in every run): smaller differences are not a "
             "finding." + "".join(f" {loop}: {_which_loads(added['loads'], data['loads'])} counted after "
                                  f"the run ({added['date'][:16].replace('T', ' ')}; the file's `added` "
                                  "says why)." for loop, added in data.get("added", {}).items()), ""]
    http = [load for load in data["loads"] if isinstance(counts.get(FLOOR, {}).get(load), (int, float))]
    if http:
        own, lowest = derived["own"], derived["lowest"]
        own_rows = []
        for load in http:
            bounds = [f"{loop} {lowest[loop][load]:.2f}×" for loop in ("aio", "uv")
                      if load in lowest.get(loop, {})]
            own_rows.append([load, f"{counts[FLOOR][load]:,.0f}", *(cell(own, loop, load) for loop in shown),
                             ", ".join(bounds)])
        lines += [*markdown(["load", "HTTP layer alone", *(f"{loop}'s own" for loop in shown),
                             "lowest ratio possible"], own_rows), "",
                  "The same less the HTTP layer alone (tinyloop.http on the same bytes, no loop, no "
                  "socket): what the loop itself runs per request (with streams, asyncio.streams' "
                  "Python too). Lowest ratio possible: the ratio of totals if the loop's own work cost "
                  "nothing, against the same rival.", ""]
    return "\n".join(lines)


def _which_loads(these: list[str], every: list[str]) -> str:
    return "every load" if set(these) >= set(every) else ", ".join(these)


def merge(counted: Path, why: str, into: Path | None = None) -> int:
    """Put the loops of ``counted`` (a ``--requests all`` file) into ``into`` (default the committed
    instructions_requests.json), replacing their cells; each gets an ``added`` entry with the run's
    date and command and ``why``.  The other loops, the floor and the file's own date stay as they
    were.  Raises SystemExit when ``counted`` does not cover every load of ``into`` or holds the floor."""
    into = into or output.RESULTS / "instructions_requests.json"
    new, data = json.loads(counted.read_text()), json.loads(into.read_text())
    if new["loads"] != data["loads"]:
        raise SystemExit(f"{counted} counts {', '.join(new['loads'])}; the file needs every load: --requests all")
    if FLOOR in new["loops"]:
        raise SystemExit("the floor is the HTTP layer alone, the same for every loop: it is not merged")
    for loop in new["loops"]:
        data["counts"][loop] = new["counts"][loop]
        data.setdefault("added", {})[loop] = {"date": new["date"], "command": new["command"],
                                              "loads": new["loads"], "why": why}
        if loop not in data["loops"]:
            data["loops"].append(loop)
    data.update(derive(data))
    data["conclusion"] = conclusion_requests(data)
    text = render_requests(data)
    output.write_json(data, into)
    output.write_text(text, into.with_suffix(".md"))
    print(text.rstrip("\n"))
    print(f"\nmerged {', '.join(new['loops'])} into {output.relative(into)} and its .md")
    return 0


def derive(data: dict[str, Any]) -> dict[str, Any]:
    """The figures the book quotes beside the counts: ``own[loop][load]``, a loop's count less the
    ``floor`` (HTTP loads only), and ``lowest[loop][load]``, the floor over the best total of the
    loop's ``RIVALS``: the ratio of totals the loop would reach if its own work cost nothing."""
    counts = data["counts"]
    own: dict[str, dict[str, float]] = {}
    lowest: dict[str, dict[str, float]] = {}
    for load in data["loads"]:
        floor = counts.get(FLOOR, {}).get(load)
        if not isinstance(floor, (int, float)):
            continue
        for loop, row in counts.items():
            if loop != FLOOR and isinstance(row.get(load), (int, float)):
                own.setdefault(loop, {})[load] = row[load] - floor
        for loop, rivals in RIVALS.items():
            totals = [counts.get(rival, {}).get(load) for rival in rivals]
            totals = [total for total in totals if isinstance(total, (int, float))]
            if totals:
                lowest.setdefault(loop, {})[load] = floor / min(totals)
    return {"own": own, "lowest": lowest}


def conclusion_requests(data: dict) -> str:
    """The run in one line: per load, the loop that serves it in the fewest instructions."""
    parts = []
    for load in data["loads"]:
        counted = {loop: row[load] for loop, row in data["counts"].items()
                   if loop != FLOOR and isinstance(row.get(load), (int, float))}
        if counted:
            best = min(counted, key=counted.__getitem__)
            parts.append(f"{load} {best} {counted[best]:,.0f}")
    return experiment.sentence("fewest instructions per request", parts)


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
    parser.add_argument("--serve", nargs=3, metavar=("LOOP", "PROGRAM", "API"), help=argparse.SUPPRESS)
    parser.add_argument("--floor", nargs=2, metavar=("LOAD", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--requests", metavar="LOADS",
                        help=f"count the server's instructions per request instead, under these loads "
                             f"(comma-separated, or 'all': {', '.join(REQUEST_LOADS)}); written to "
                             "instructions_requests.json (with --reference: only 'all', every loop)")
    parser.add_argument("--loops", default=",".join(REQUEST_LOOPS),
                        help="with --requests: the loops to count (default %(default)s)")
    parser.add_argument("--merge", metavar="JSON",
                        help="maintainers: put the loops of JSON (a --requests all run) into the committed "
                             "instructions_requests.json in place of theirs, saying so in its `added` "
                             "(with --why): for a loop that changed since the full run")
    parser.add_argument("--why", help="with --merge: why those loops were counted again")
    args = parser.parse_args(argv)
    if args.merge:
        if not args.why:
            parser.error("--merge needs --why: the file says why those loops were counted again")
        return merge(Path(args.merge), args.why)
    if args.worker:  # one run under callgrind
        loop, op, n = args.worker
        OPERATIONS[op][0](int(n), factory_for(loop))
        return 0
    if args.serve:  # one server under callgrind
        serve_for_count(*args.serve)
        return 0
    if args.floor:  # the HTTP layer alone under callgrind
        http_layer_alone(args.floor[0], int(args.floor[1]))
        return 0
    if args.requests:
        loads = list(REQUEST_LOADS) if args.requests == "all" else args.requests.split(",")
        unknown = [name for name in [*loads, *args.loops.split(",")]
                   if name not in {*REQUEST_LOADS, *LOOPS, *RING_CORES, FLOOR}]
        if unknown:
            parser.error(f"unknown load or loop: {', '.join(unknown)}")
        if args.reference and (loads != list(REQUEST_LOADS) or args.loops != ",".join(REQUEST_LOOPS)):
            parser.error("--requests --reference counts every load on every loop: --requests all, "
                         "no --loops")
        out = output.json_path(parser, args, "instructions_requests.json")
        experiment.require("instructions", "valgrind")
        clock = experiment.Clock()
        loops = args.loops.split(",")
        counts = per_request(loops, loads)
        valgrind = version_line(["valgrind", "--version"])
        data = experiment.document("instructions", argv, clock, settings={
            "loads": {load: {"what": REQUEST_LOADS[load][2], "n": REQUEST_LOADS[load][3],
                             "delta": REQUEST_LOADS[load][4]} for load in loads}},
            tools={"valgrind": valgrind}, loops=loops, loads=loads, counts=counts,
            valgrind=valgrind, python=sys.version.split()[0])
        data.update(derive(data))
        return experiment.conclude(data, out, clock, render_requests, conclusion_requests, ".md")
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
