# benchmarks/harness/pyperf_runs.py
"""In-process timings by pyperf, for an experiment whose own process does more.

    values = pyperf_runs.run("benchmarks.aio_changes:TIMINGS", names, pyperf_runs.QUICK)

pyperf's ``Runner`` owns its process's command line and runs the program
again in every worker, so an experiment hands its timings to a child, ``python
-m benchmarks.harness.pyperf_runs MODULE:ATTR``, where ``MODULE.ATTR`` is a
sequence of :class:`Timing` declared at import (the same in every process).
The child is a pyperf program like any other (calibration, warm-ups, worker
processes, every value kept) and writes pyperf's JSON, which :func:`run` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from benchmarks.harness.machine import ROOT

__all__ = ["DEFAULT", "QUICK", "Timing", "run"]

MODULE = "benchmarks.harness.pyperf_runs"  # run with -m: its __name__ is then "__main__"

# pyperf's settings: 5 processes x 3 values (15, as the experiments' repetitions),
# one warm-up each; --quick: a look, one process and one value of a few loops.
DEFAULT = ["--processes", "5", "--values", "3", "--warmups", "1", "--min-time", "0.1"]
QUICK = ["--processes", "1", "--values", "1", "--warmups", "0", "--loops", "4"]


@dataclass(frozen=True)
class Timing:
    """One pyperf benchmark: ``func(loops, *args)`` returns the seconds ``loops`` took;
    with ``inner_loops``, each loop is that many operations."""

    name: str
    func: Callable[..., float]
    args: tuple = ()
    inner_loops: int | None = None


def run(table: str, names: Sequence[str], options: Sequence[str] = DEFAULT, *,
        cpu: int | None = None, timeout: float = 1800, keep: Path | None = None) -> dict[str, list[float]]:
    """Time the Timings ``names`` of ``table`` (``"module:ATTR"``) under pyperf, in a child.

    ``options`` are pyperf's (``DEFAULT``, ``QUICK``, or any ``--processes``...);
    ``cpu`` pins the workers (``--affinity``); ``keep`` is where to copy pyperf's
    own JSON (for ``python -m pyperf stats``).  Returns each name's values in
    seconds per operation, every worker's.  Raises ``RuntimeError`` with the
    child's output if it fails.
    """
    with tempfile.TemporaryDirectory(prefix="tinyloop-pyperf-") as tmp:
        out = Path(tmp) / "pyperf.json"
        argv = [sys.executable, "-m", MODULE, table, "--names", json.dumps(list(names)), "--quiet",
                "--output", str(out), *options]
        if cpu is not None:
            argv.append(f"--affinity={cpu}")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"pyperf failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        import pyperf  # the child has just run it: installed
        suite = pyperf.BenchmarkSuite.load(str(out))
        values = {bench.get_name(): list(bench.get_values()) for bench in suite.get_benchmarks()}
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, keep)
    missing = [name for name in names if name not in values]
    if missing:
        raise RuntimeError(f"pyperf ran no benchmark named {', '.join(map(repr, missing))} in {table}")
    return values


def _main() -> None:
    import pyperf

    table = sys.argv[1]  # also in program_args below, so every worker gets it first

    def forward(cmd: list[str], args: argparse.Namespace) -> None:
        cmd.extend(["--names", args.names])

    runner = pyperf.Runner(add_cmdline_args=forward, program_args=("-m", MODULE, table))
    runner.argparser.add_argument("table", help="MODULE:ATTR, a sequence of Timing")
    runner.argparser.add_argument("--names", required=True, help="the Timings to run, a JSON list")
    args = runner.parse_args()
    module, _, attr = args.table.partition(":")
    wanted = json.loads(args.names)
    for timing in getattr(import_module(module), attr):
        if timing.name in wanted:
            runner.bench_time_func(timing.name, timing.func, *timing.args, inner_loops=timing.inner_loops)


if __name__ == "__main__":
    _main()
