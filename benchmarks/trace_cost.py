# benchmarks/trace_cost.py
"""What do the instrument hooks cost, off and on, on tinyloop.aio and tinyloop.uv?

    python -m benchmarks.trace_cost                every loop and variant, counted (a few minutes)
    python -m benchmarks.trace_cost --quick        fewer requests, for a look
    python -m benchmarks.trace_cost --reference    maintainers: the book's benchmarks/results/trace_cost.*

Counted in CPU instructions under valgrind's callgrind, like
benchmarks/instructions.py (whose reasons hold here: a count does not move
with the machine's load, a time on a shared two-core machine does).  Two
workloads, on 127.0.0.1 only:

    http        the server's instructions per request on keep-alive HTTP:
                the book's HTTPProtocol (tinyloop/aio/server.py) on the loop,
                run under callgrind, answering GET / on one connection from a
                client in this process (not counted), one request at a time
    callbacks   instructions per callback: a chain of call_soon callbacks,
                each scheduling the next (the loop's hot path alone)

Each figure is (count(N + DELTA) - count(N)) / DELTA, so start-up, imports
and the connection's set-up cancel out; with --repeat R, the median of R
such figures (the JSON keeps each, and their spread).  The workers run
with PYTHONHASHSEED=0, so that two runs lay out their dicts alike.  The variants of each loop:

    no hooks    the loop without its hook sites: the baseline of the issue's
                "<= 2 % when off".  aio: NoHookSites below, a subclass whose
                iteration helpers are Part II's without the instrument tests.
                uv: the extension built from a copy of its sources in which
                every test of the C flag is the constant False, so the C
                compiler drops the sites (benchmarks/uv_variants.py's
                ``no-sites``; the product ships no switch for it).  uv's
                other rows use ``shipped``, a build of the same sources,
                unchanged, beside it, not the installed one
    off         the loop as shipped, no instrument installed
    no-op       an instrument with every hook, each doing nothing: the cost
                of the dispatch alone
    recorder    tinyloop.trace's Recorder, the flight recorder

Rules this file keeps:
  * The workloads are the same for every variant; only the loop differs.
  * The JSON holds every figure the table shows and how it was measured.
  * The uv builds are benchmarks/uv_variants.py's (its rules: under
    benchmarks/results/local/build/uv/, rebuilt when the sources change,
    under the shared build lock).
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
import time
import types
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from benchmarks.harness.machine import ROOT, display, fingerprint, version_line
from benchmarks.harness.output import add_arguments, json_path, write_json, write_text
from benchmarks.harness.summary import summarize
from benchmarks import uv_variants
from tinyloop.aio.server import HTTPProtocol
from tinyloop.aio.unix_events import SelectorEventLoop
from tinyloop.callbacks import loop as reactor
from tinyloop.http import HELLO
from tinyloop.testing import recv_response
from tinyloop.trace.instrument import HOOKS
from tinyloop.trace.recorder import Recorder

SCHEMA = "tinyloop-trace-cost/2"
LOOPS = ("aio", "uv")
VARIANTS = ("no hooks", "off", "no-op", "recorder")
MESSAGE = b"x" * 64
REQUEST = b"GET / HTTP/1.1\r\nHost: trace-cost\r\n\r\n"
# Operations in the short and the long run of each count (--quick: a tenth).
SETTINGS = {"http": (200, 2_000), "callbacks": (1_000, 20_000)}


class _WithoutHookSites(ast.NodeTransformer):
    """A method's syntax tree as it would be without its hook sites.

    Each test ``X._instrument is not None`` becomes False (``is None``:
    True), a ``not``/``and``/``or`` that this makes constant is folded, and
    an ``if`` on a constant keeps only the branch that runs: what the C
    compiler does to uv's ``no-sites`` build, done here to Python.
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
    """``method`` recompiled from its source by :class:`_WithoutHookSites`, as a method of ``owner``.

    It runs in its own module's globals; a zero-argument ``super()`` in it
    means ``super(owner, self)``.  Raises ValueError if the method has no
    hook site to drop (the variant would measure nothing).
    """
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
    [class_code] = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    [function_code] = [c for c in class_code.co_consts if isinstance(c, types.CodeType)]
    closure = tuple(types.CellType(owner) for name in function_code.co_freevars if name == "__class__")
    if len(closure) != len(function_code.co_freevars):
        raise ValueError(f"{method.__qualname__} closes over {function_code.co_freevars}")
    return types.FunctionType(function_code, method.__globals__, method.__name__, method.__defaults__,
                              closure or None)


class NoHookSites(SelectorEventLoop):
    """tinyloop.aio's iteration as it would be without its hook sites.

    Each iteration step that holds a hook site is the loop's own, rebuilt
    from its source without the ``self._instrument`` tests (see
    without_hook_sites, below the class): aio's _run_ready (which goes
    straight to the handles, as asyncio's _run_once does), and Part II's
    _compute_timeout, _process_events and _move_due_timers.  Nothing is
    copied, so the variant follows the loop.  The transports' tests around
    each read and write stay: both rows pay them.
    """


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

    For uv, whichever tinyloop.uv._loop is imported: the worker's use_build
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
    """``number`` round trips of a 64-byte message over TCP on 127.0.0.1 (both ends on ``loop``)."""

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
          short: int, delta: int) -> concurrent.futures.Future:
    """A future of the instructions per operation: (long run - short run) / delta."""
    runs = [pool.submit(_collected, loop_name, variant, workload, n) for n in (short + delta, short)]
    result: concurrent.futures.Future = concurrent.futures.Future()

    def done(_: Any) -> None:
        if all(run.done() for run in runs) and not result.done():
            try:
                result.set_result((runs[0].result() - runs[1].result()) / delta)
            except Exception as error:  # noqa: BLE001 - handed to the caller
                result.set_exception(error)

    for run in runs:
        run.add_done_callback(done)
    return result


def render(data: dict[str, Any]) -> str:
    """The text table of a result: instructions per request and per callback, each against "no hooks"."""
    lines = [f"{'loop':<5} {'variant':<9} {'per request':>12} {'vs no hooks':>12} "
             f"{'per callback':>13} {'vs no hooks':>12}"]
    for loop_name in data["loops"]:
        counts = data["counts"][loop_name]
        for variant in VARIANTS:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trace_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the operations")
    parser.add_argument("--loops", default=",".join(LOOPS), help="aio,uv (default both)")
    parser.add_argument("--repeat", type=int, default=1, help="counts per figure, median (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at once (default 2)")
    parser.add_argument("--worker", nargs=4, metavar=("LOOP", "VARIANT", "WORKLOAD", "N"), help=argparse.SUPPRESS)
    add_arguments(parser, "trace_cost.json")
    args = parser.parse_args(argv)
    if args.worker:
        loop_name, variant, workload, number = args.worker
        _worker(loop_name, variant, workload, int(number))
        return 0
    out = json_path(parser, args, "trace_cost.json")
    if shutil.which("valgrind") is None:
        print("trace_cost.py needs valgrind (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    loops = [name for name in args.loops.split(",") if name]
    settings = {w: (s // 10, d // 10) if args.quick else (s, d) for w, (s, d) in SETTINGS.items()}
    if "uv" in loops:
        print("building tinyloop.uv with and without hook sites ...", flush=True)
        for build in ("shipped", "no-sites"):  # once, before the workers need them
            uv_variants.build(build)
    data: dict[str, Any] = {
        "schema": SCHEMA, "command": display([sys.executable, *sys.argv]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+0000"),
        "machine": fingerprint(), "valgrind": version_line(["valgrind", "--version"]),
        "quick": args.quick, "settings": {w: {"n": s, "delta": d} for w, (s, d) in settings.items()},
        "repeat": args.repeat, "loops": loops, "variants": list(VARIANTS), "counts": {}, "spread": {}}
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {(loop_name, variant, workload): [count(pool, loop_name, variant, workload, *settings[workload])
                                                    for _ in range(args.repeat)]
                   for loop_name in loops for variant in VARIANTS for workload in ("http", "callbacks")}
        for (loop_name, variant, workload), repeats in futures.items():
            row = data["counts"].setdefault(loop_name, {}).setdefault(variant, {})
            try:
                values = [future.result() for future in repeats]
            except RuntimeError as error:
                row[workload] = f"not counted: {error}"
            else:
                row[workload] = summarize(values)["median"]
                data["spread"].setdefault(loop_name, {}).setdefault(variant, {})[workload] = values
            print(f"{loop_name:4} {variant:9} {workload:9} {row[workload]:>12,.0f} instructions/op"
                  if isinstance(row[workload], float) else f"{loop_name} {variant} {workload}: {row[workload]}",
                  flush=True)
    data["seconds"] = round(time.monotonic() - started)
    write_json(data, out)
    table = render(data)
    write_text(table, out.with_suffix(".txt"))
    print(table)
    print(f"wrote {out} and {out.with_suffix('.txt')} in {data['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
