# benchmarks/trace_cost.py
"""What do the instrument hooks cost, off and on, on tinyloop.aio and tinyloop.uv?

    python -m benchmarks.trace_cost                every loop and variant, counted (a few minutes)
    python -m benchmarks.trace_cost --quick        a tenth of the operations, "no hooks" and "off" only
    python -m benchmarks.trace_cost --reference    maintainers: the book's benchmarks/results/trace_cost.*

Counted in CPU instructions under valgrind's callgrind, as benchmarks/instructions.py
counts (a count does not move with the machine's load).  Two workloads on 127.0.0.1:
``http``, the server's instructions per keep-alive GET / (HTTPProtocol, one
request at a time from a client in this process, not counted), and
``callbacks``, per callback of a call_soon chain.  Each figure is
(count(N + DELTA) - count(N)) / DELTA, so start-up cancels out; with --repeat
R, the median of R.  Workers run with PYTHONHASHSEED=0.  The variants of each loop:

    no hooks    the baseline of "<= 2 % when off": aio's NoHookSites (below);
                uv built with every test of the C flag the constant False
                (benchmarks/uv_variants.py's ``no-sites``; uv's other rows run
                its ``shipped`` build of the same sources, beside it)
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
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from typing import Any

from benchmarks import uv_variants
from benchmarks.harness import experiment, output
from benchmarks.harness.machine import ROOT, version_line
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
REQUEST = b"GET / HTTP/1.1\r\nHost: trace-cost\r\n\r\n"
# Operations in the short and the long run of each count (--quick: a tenth).
SETTINGS = {"http": (200, 2_000), "callbacks": (1_000, 20_000)}


class _WithoutHookSites(ast.NodeTransformer):
    """A method's syntax tree without its hook sites: ``X._instrument is not None`` becomes
    False (``is None``: True), an ``and``/``or`` made constant is folded, and an ``if`` on a
    constant keeps the branch that runs, as the C compiler does to uv's ``no-sites`` build.

    Discussion: a textual edit is not the same code.  CPython 3.11 compiles
    ``x or False`` to one more jump, and ``if False:`` to a NOP, so the
    baseline would run instructions the hookless loop would not.
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
    source = textwrap.dedent(inspect.getsource(method))
    tree = ast.parse(source)
    before = ast.dump(tree)
    tree = ast.fix_missing_locations(_WithoutHookSites().visit(tree))
    if ast.dump(tree) == before:
        raise ValueError(f"{method.__qualname__} has no hook site")
    # Compiled inside a class body, as it was written: that is what gives a
    # zero-argument super() its __class__ cell.
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


# -- The variants and the workloads ------------------------------------------------------

def uv_build(variant: str) -> str:
    """The benchmarks/uv_variants.py build that uv's ``variant`` runs on."""
    return "no-sites" if variant == "no hooks" else "shipped"


def make_loop(loop_name: str, variant: str) -> asyncio.AbstractEventLoop:
    """A new loop of ``loop_name`` ("aio" or "uv") set up as ``variant``.

    For uv, whichever tinyloop.uv._loop is imported: the worker's uv_variants.use
    first selects the build (uv_build).
    """
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
            sock.sendall(REQUEST)
            status, _, body = recv_response(sock, buffer)
            if status != 200 or body != HELLO:
                raise RuntimeError(f"GET / answered {status} {body[:40]!r}")


# -- Counting ------------------------------------------------------------------------------

def _worker(loop_name: str, variant: str, workload: str, number: int) -> None:
    """In the process callgrind counts: run one workload on one variant."""
    if loop_name == "uv":
        uv_variants.use(uv_build(variant))
    loop = make_loop(loop_name, variant)
    try:
        if workload == "http":
            serve_one_connection(loop, lambda port: print(port, flush=True))
        else:
            callbacks(loop, number)
    finally:
        loop.close()


def _collected(loop_name: str, variant: str, workload: str, number: int) -> int:
    """Instructions callgrind counted in the worker for ``number`` operations."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, "-m", "benchmarks.trace_cost", "--worker", loop_name, variant, workload, str(number)]
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env,
                                   cwd=ROOT)
        try:
            if workload == "http":
                line = process.stdout.readline()
                if not line.strip().isdigit():
                    raise RuntimeError(f"the server did not announce its port: {line!r}")
                client(int(line), number)
            process.wait(timeout=900)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        errors.seek(0)
        text = errors.read()
    for line in text.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"no count from callgrind for {loop_name} {variant} {workload}: {text[-800:]}")


def count(pool: concurrent.futures.Executor, loop_name: str, variant: str, workload: str,
          short: int, delta: int) -> Callable[[], float]:
    """Start the two runs of one figure; returns what waits for them and gives the instructions
    per operation, (long run - short run) / delta (RuntimeError if a run failed)."""
    runs = [pool.submit(_collected, loop_name, variant, workload, n) for n in (short + delta, short)]
    return lambda: (runs[0].result() - runs[1].result()) / delta


def render(data: dict[str, Any]) -> str:
    """The text table of a result: instructions per request and per callback, each against "no hooks"."""
    lines = [f"{'loop':<5} {'variant':<9} {'per request':>12} {'vs no hooks':>12} "
             f"{'per callback':>13} {'vs no hooks':>12}"]
    for loop_name in data["loops"]:
        counts = data["counts"][loop_name]
        for variant in data["variants"]:
            cells = []
            for workload in ("http", "callbacks"):
                value, base = counts[variant].get(workload), counts["no hooks"].get(workload)
                if isinstance(value, (int, float)):
                    ratio = f"{value / base - 1:+.1%}" if isinstance(base, (int, float)) else "-"
                    cells += [f"{value:,.0f}", ratio]
                else:
                    cells += [str(value), "-"]
            lines.append(f"{loop_name:<5} {variant:<9} {cells[0]:>12} {cells[1]:>12} {cells[2]:>13} {cells[3]:>12}")
    lines += ["", f"Instructions per operation, counted by callgrind ({data['valgrind']}); "
                  f"{data['machine']['python']}; {data['date']}.",
              "per request: the server's, GET / on one keep-alive connection; "
              "per callback: a call_soon chain.",
              f"Command: {data['command']}"]
    return "\n".join(lines) + "\n"


def conclusion(data: dict[str, Any]) -> str:
    """The run in one line: what the hooks cost when off, against the loop without them."""
    parts = []
    for loop_name in data["loops"]:
        counts = data["counts"][loop_name]
        cells = [f"{counts['off'][w] / counts['no hooks'][w] - 1:+.1%} per {what}"
                 for w, what in (("http", "request"), ("callbacks", "callback"))
                 if all(isinstance(counts[v].get(w), float) for v in ("off", "no hooks"))]
        parts.append(f"{loop_name} {', '.join(cells) or 'not counted'}")
    return "trace_cost: instructions with the hooks off, against no hook sites: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = experiment.parser("trace_cost", __doc__, repeat=1, pin=False)
    parser.add_argument("--loops", default=",".join(LOOPS), help="aio,uv (default both)")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at once (default 2)")
    parser.add_argument("--worker", nargs=4, metavar=("LOOP", "VARIANT", "WORKLOAD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        loop_name, variant, workload, number = args.worker
        _worker(loop_name, variant, workload, int(number))
        return 0
    out = output.json_path(parser, args, "trace_cost.json")
    if shutil.which("valgrind") is None:
        raise SystemExit("trace_cost needs valgrind (Debian: apt-get install valgrind)")
    loops = [name for name in args.loops.split(",") if name]
    repeat = args.repeat or 1
    variants = VARIANTS[:2] if args.quick else VARIANTS  # --quick: the baseline and the shipped loop
    settings = {w: (s // 10, d // 10) if args.quick else (s, d) for w, (s, d) in SETTINGS.items()}
    if "uv" in loops:
        print("building tinyloop.uv with and without hook sites ...", flush=True)
        for build in ("shipped", "no-sites"):  # once, before the workers need them
            uv_variants.build(build)
    clock = experiment.Clock()
    data = experiment.document("trace_cost", argv, clock, settings={
        "quick": args.quick, "repeat": repeat, **{w: {"n": s, "delta": d} for w, (s, d) in settings.items()}})
    data.update(valgrind=version_line(["valgrind", "--version"]), loops=loops, variants=list(variants),
                counts={}, spread={})
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    try:
        figures = {(loop_name, variant, workload): [count(pool, loop_name, variant, workload, *settings[workload])
                                                    for _ in range(repeat)]
                   for loop_name in loops for variant in variants for workload in ("http", "callbacks")}
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
    data["elapsed_s"] = clock.elapsed()
    text = render(data)
    experiment.finish(data, out, text, conclusion(data), extra={out.with_suffix(".txt"): text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
