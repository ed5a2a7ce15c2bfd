# benchmarks/trace_cost.py
"""What do the instrument hooks cost, off and on, on tinyloop.aio and tinyloop.uv?

    python -m benchmarks.trace_cost                every loop and variant, counted (a few minutes)
    python -m benchmarks.trace_cost --quick        a tenth of the operations, "no hooks" and "off" only
    python -m benchmarks.trace_cost --reference    maintainers: the book's benchmarks/results/trace_cost.*

Counted in CPU instructions under valgrind's callgrind, as benchmarks/instructions.py counts, in
two workloads: ``http``, the server's instructions per keep-alive GET / (HTTPProtocol; the client,
one request at a time from this process, is not counted), and ``callbacks``, per callback of a
call_soon chain.  Each figure is (count(N + DELTA) - count(N)) / DELTA, so start-up cancels out;
with --repeat R, the median of R.  Workers run with PYTHONHASHSEED=0.  The variants of each loop:

    no hooks    aio: NoHookSites (below); uv: benchmarks/uv_variants.py's ``no-sites`` build, where
                uv's other rows run its ``shipped`` build of the same sources
    off         the loop as shipped, no instrument installed
    no-op       an instrument with every hook, each doing nothing: the dispatch alone
    recorder    tinyloop.trace's Recorder, the flight recorder
"""

from __future__ import annotations

import __future__
import argparse
import ast
import asyncio
import concurrent.futures
import inspect
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks import uv_variants
from benchmarks.harness import callgrind, experiment, output
from benchmarks.harness.machine import version_line
from benchmarks.harness.render import align
from benchmarks.harness.summary import median
from tinyloop.aio.server import HTTPProtocol
from tinyloop.aio.unix_events import SelectorEventLoop
from tinyloop.callbacks import loop as reactor
from tinyloop.http import HELLO
from tinyloop.testing import recv_response
from tinyloop.trace.instrument import HOOKS
from tinyloop.trace.recorder import Recorder

LOOPS = ("aio", "uv")
VARIANTS = ("no hooks", "off", "no-op", "recorder")
WORKLOADS = {"http": "request", "callbacks": "callback"}
# Operations in the short and the long run of each count (--quick: a tenth).
SETTINGS = {"http": (200, 2_000), "callbacks": (1_000, 20_000)}


class _WithoutHookSites(ast.NodeTransformer):
    """A method's syntax tree without its hook sites: ``X._instrument is not None`` becomes
    False (``is None``: True), an ``and``/``or`` made constant is folded, and an ``if`` on a
    constant keeps the branch that runs, as the C compiler does to uv's ``no-sites`` build.
    (Folded here, not left to CPython 3.11: it compiles ``x or False`` to one more jump and
    ``if False:`` to a NOP, instructions the hookless loop would not run.)
    """

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.left, ast.Attribute) and node.left.attr == "_instrument"
                and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot))
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None):
            return ast.copy_location(ast.Constant(isinstance(node.ops[0], ast.Is)), node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        neutral = isinstance(node.op, ast.And)  # True changes nothing in an and, False in an or
        values = [v for v in node.values if not (isinstance(v, ast.Constant) and v.value is neutral)]
        if any(isinstance(v, ast.Constant) and v.value is (not neutral) for v in values):
            return ast.copy_location(ast.Constant(not neutral), node)
        if len(values) <= 1:
            return values[0] if values else ast.copy_location(ast.Constant(neutral), node)
        node.values = values
        return node

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        if isinstance(node.test, ast.Constant):
            return node.body if node.test.value else (node.orelse or None)
        return node


def without_hook_sites(method: Callable[..., Any], owner: type) -> Callable[..., Any]:
    """``method`` recompiled from its source by :class:`_WithoutHookSites`, as a method of ``owner``
    (its module's globals; a zero-argument ``super()`` means ``super(owner, self)``).  Raises
    ValueError if it has no hook site to drop (the variant would measure nothing)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    before = ast.dump(tree)
    tree = _WithoutHookSites().visit(tree)
    if ast.dump(tree) == before:
        raise ValueError(f"{method.__qualname__} has no hook site")
    # Compiled inside a class body, as it was written: that gives a zero-argument super() its __class__ cell.
    wrapper = ast.parse("class _Owner:\n    pass")
    wrapper.body[0].body = tree.body
    ast.increment_lineno(wrapper, method.__code__.co_firstlineno - 1)
    code = compile(ast.fix_missing_locations(wrapper), inspect.getsourcefile(method) or "<hookless>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    namespace: dict[str, Any] = {}
    exec(code, method.__globals__, namespace)  # defines _Owner and the method, in the method's module
    function = vars(namespace["_Owner"])[method.__name__]
    for cell in function.__closure__ or ():  # __class__, the one a method can close over
        cell.cell_contents = owner
    return function


class NoHookSites(SelectorEventLoop):
    """tinyloop.aio's iteration without its hook sites: aio's _run_ready and Part II's
    _compute_timeout, _process_events and _move_due_timers, rebuilt from the loop's own
    source by without_hook_sites (so the variant follows the loop).  The transports'
    tests around each read and write stay: both rows pay them."""


for _owner, _name in ((SelectorEventLoop, "_run_ready"), (reactor.Loop, "_compute_timeout"),
                      (reactor.Loop, "_process_events"), (reactor.Loop, "_move_due_timers")):
    setattr(NoHookSites, _name, without_hook_sites(getattr(_owner, _name), NoHookSites))


class NoOp:
    """An instrument with every hook, each doing nothing."""


for _hook in HOOKS:
    setattr(NoOp, _hook, lambda self, *args: None)


def make_loop(loop_name: str, variant: str) -> asyncio.AbstractEventLoop:
    """A new loop of ``loop_name`` ("aio" or "uv") set up as ``variant``; for uv, whichever
    build of tinyloop.uv._loop the process imports (the worker's uv_variants.use selects it)."""
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


def serve_one_connection(loop: asyncio.AbstractEventLoop, announce: Callable[[int], None]) -> None:
    """Serve HTTP on 127.0.0.1 (a free port, passed to ``announce``) until the first connection closes."""

    async def main() -> None:
        closed = loop.create_future()

        class Once(HTTPProtocol):
            def connection_lost(self, exc: Exception | None) -> None:
                if not closed.done():
                    closed.set_result(None)

        server = await loop.create_server(Once, "127.0.0.1", 0)
        announce(server.sockets[0].getsockname()[1])
        await closed
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())


def client(port: int, requests: int, timeout: float = 600.0) -> None:
    """Send GET / ``requests`` times, one after another, on one keep-alive connection; check each answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        buffer = bytearray()
        for _ in range(requests):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: trace-cost\r\n\r\n")
            status, _, body = recv_response(sock, buffer)
            if status != 200 or body != HELLO:
                raise RuntimeError(f"GET / answered {status} {body[:40]!r}")


def _worker(loop_name: str, variant: str, workload: str, number: int) -> None:
    """In the process callgrind counts: run one workload on one variant."""
    if loop_name == "uv":
        uv_variants.use("no-sites" if variant == "no hooks" else "shipped")
    loop = make_loop(loop_name, variant)
    try:
        if workload == "http":
            serve_one_connection(loop, lambda port: print(port, flush=True))
        else:
            callbacks(loop, number)
    finally:
        loop.close()


def _count(loop_name: str, variant: str, workload: str, number: int) -> int:
    """Instructions callgrind counts in the worker for ``number`` operations (the client's not among them)."""
    def load(process: subprocess.Popen) -> None:
        line = process.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the server did not announce its port: {line!r}")
        client(int(line), number)
    return callgrind.collected([sys.executable, "-m", "benchmarks.trace_cost", "--worker", loop_name, variant,
                                workload, str(number)], env={**os.environ, "PYTHONHASHSEED": "0"},
                               during=load if workload == "http" else None)


def render(data: dict[str, Any]) -> str:
    """The text table of a result: instructions per request and per callback, each against "no hooks"."""
    rows = []
    for loop_name in data["loops"]:
        counts = data["counts"][loop_name]
        for variant in data["variants"]:
            cells = [f"{loop_name} {variant}"]
            for workload in WORKLOADS:
                value, base = counts[variant].get(workload), counts["no hooks"].get(workload)
                counted = isinstance(value, (int, float))
                cells += [f"{value:,.0f}" if counted else str(value),
                          f"{value / base - 1:+.1%}" if counted and isinstance(base, (int, float)) else "-"]
            rows.append(cells)
    header = ["loop, variant", "per request", "vs no hooks", "per callback", "vs no hooks"]
    return "\n".join([*align(header, rows), "",
                      f"Instructions per operation, counted by callgrind ({data['valgrind']}); "
                      f"{data['machine']['python']}; {data['date']}.",
                      "per request: the server's, GET / on one keep-alive connection; "
                      "per callback: a call_soon chain.",
                      f"Command: {data['command']}"]) + "\n"


def conclusion(data: dict[str, Any]) -> str:
    """The run in one line: what the hooks cost when off, against the loop without them."""
    parts = []
    for loop_name in data["loops"]:
        counts = data["counts"][loop_name]
        cells = [f"{counts['off'][w] / counts['no hooks'][w] - 1:+.1%} per {what}"
                 for w, what in WORKLOADS.items() if all(isinstance(counts[v].get(w), float) for v in ("off", "no hooks"))]
        parts.append(f"{loop_name} {', '.join(cells) or 'not counted'}")
    return experiment.sentence("trace_cost: instructions with the hooks off, against no hook sites", parts,
                               sep="; ")


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("trace_cost", __doc__, repeat=1, pin=False)
    parser.add_argument("--worker", nargs=4, metavar=("LOOP", "VARIANT", "WORKLOAD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        loop_name, variant, workload, number = args.worker
        _worker(loop_name, variant, workload, int(number))
        return 0
    out = output.json_path(parser, args, "trace_cost.json")
    experiment.require("trace_cost", "valgrind")
    repeat = args.repeat or 1
    variants = VARIANTS[:2] if args.quick else VARIANTS  # --quick: the baseline and the shipped loop
    settings = {w: (s // 10, d // 10) if args.quick else (s, d) for w, (s, d) in SETTINGS.items()}
    print("building tinyloop.uv with and without hook sites ...", flush=True)
    for build in ("shipped", "no-sites"):  # once, before the workers need them
        uv_variants.build(build)
    clock = experiment.Clock()
    data = experiment.document(
        "trace_cost", argv, clock, valgrind=version_line(["valgrind", "--version"]), loops=list(LOOPS),
        variants=list(variants), counts={}, spread={},
        settings={"quick": args.quick, "repeat": repeat,
                  **{w: {"n": n, "delta": d} for w, (n, d) in settings.items()}})
    pool = concurrent.futures.ThreadPoolExecutor(2)  # callgrind runs at once: a count does not mind
    try:
        cells = [(loop, variant, workload) for loop in LOOPS for variant in variants for workload in WORKLOADS]
        figures = {cell: [callgrind.per_operation(pool, partial(_count, *cell), *settings[cell[2]])
                          for _ in range(repeat)] for cell in cells}
        for (loop_name, variant, workload), repeats in figures.items():
            row = data["counts"].setdefault(loop_name, {}).setdefault(variant, {})
            try:
                values = [figure() for figure in repeats]
            except RuntimeError as error:
                row[workload] = f"not counted: {error}"
                print(f"{loop_name} {variant} {workload}: {row[workload]}", flush=True)
                continue
            row[workload] = median(values)
            data["spread"].setdefault(loop_name, {}).setdefault(variant, {})[workload] = values
            print(f"{loop_name:4} {variant:9} {workload:9} {row[workload]:>12,.0f} instructions/op", flush=True)
    finally:  # on Ctrl-C or SIGTERM, no run that has not started yet
        pool.shutdown(cancel_futures=True)
    return experiment.conclude(data, out, clock, render, conclusion)


if __name__ == "__main__":
    sys.exit(main())
