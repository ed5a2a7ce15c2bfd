# tests/tornado_suite.py
#
# tornado 6's own test suite, as its package ships it, run on one event loop
# in a child process, and its outcome read back as counts and test ids.
#
# Rules this file keeps:
#   * tornado's suite is run unchanged: ``python -m tornado.test.runtests``,
#     with nothing done first but ``asyncio.set_event_loop_policy(...)``
#     (tornado makes every loop through asyncio.new_event_loop(), so the
#     policy decides which loop each of its tests runs on).
#   * One child process per loop, so a loop that hangs or crashes harms no
#     other run, and a time limit on each (TIMEOUT seconds).
#   * The outcome is read from unittest's own report: "Ran N tests", the
#     closing "OK (...)" / "FAILED (...)" line, and the "FAIL: id" /
#     "ERROR: id" headings of the failure details.  Nothing else in the
#     output (tornado logs to the same stream) is trusted.
#
# Usage (from the repository root):
#
#     python tests/tornado_suite.py                  # every loop, a table
#     python tests/tornado_suite.py aio              # one loop
#     python tests/tornado_suite.py --child aio      # what the parent runs
#
# tests/test_aio_tornado.py runs it and compares the loops.

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["LOOPS", "SuiteResult", "parse_report", "run_suite"]

# Loop name -> the line that installs its policy in the child.
LOOPS = {
    "asyncio": "pass  # the default policy",
    "uvloop": "import uvloop; asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())",
    "aio": "import tinyloop.aio; asyncio.set_event_loop_policy(tinyloop.aio.EventLoopPolicy())",
    "uv": "import tinyloop.uv; asyncio.set_event_loop_policy(tinyloop.uv.EventLoopPolicy())",
    "ring": "import tinyloop.ring; asyncio.set_event_loop_policy(tinyloop.ring.EventLoopPolicy())",
}
TIMEOUT = 400.0  # seconds one run of the whole suite may take (about 40 s here, on 2 cores)
ROOT = Path(__file__).resolve().parent.parent

_CHILD = """\
import asyncio, runpy, sys
{install}
sys.argv = ["tornado.test.runtests", *{tests!r}]
runpy.run_module("tornado.test.runtests", run_name="__main__", alter_sys=True)
"""


@dataclasses.dataclass
class SuiteResult:
    """What one run of tornado's suite reported.

    ``ran`` tests in all, of which ``failures``, ``errors`` and ``skipped``
    (counts from unittest's closing line); ``passed`` is the rest, less
    expected failures and unexpected successes.  ``failed_ids`` holds the ids
    (``module.Class.test``) of the tests that failed or errored.
    ``returncode`` is the child's exit status (tornado's runner also exits 1
    when a test logged a warning, so it is not the verdict), ``seconds`` the
    wall-clock time, ``output`` the child's whole stderr.
    """

    loop: str
    ran: int
    failures: int
    errors: int
    skipped: int
    expected_failures: int
    unexpected_successes: int
    failed_ids: frozenset[str]
    returncode: int
    seconds: float
    output: str = dataclasses.field(repr=False, default="")

    @property
    def passed(self) -> int:
        return (self.ran - self.failures - self.errors - self.skipped
                - self.expected_failures - self.unexpected_successes)


_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_VERDICT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$", re.M)
# A heading in unittest's failure details: a line of '=', then "FAIL: name (id)".
_HEADING = re.compile(r"^={70}\n(FAIL|ERROR|UNEXPECTED SUCCESS): (\S+)(?: \(([^)]*)\))?", re.M)


def _test_id(name: str, where: str | None) -> str:
    """The full id from a heading's two parts.

    Python 3.11 writes ``test_x (module.Class.test_x)``, older ones
    ``test_x (module.Class)``; a setUpClass error has no parentheses at all.
    """
    if where is None:
        return name
    return where if where.endswith("." + name) else f"{where}.{name}"


def parse_report(loop: str, output: str, returncode: int = 0, seconds: float = 0.0) -> SuiteResult:
    """Read unittest's report out of ``output`` (the child's stderr).

    Returns a :class:`SuiteResult`.  Raises ValueError when the output has
    no "Ran N tests" line (the suite crashed or was killed before the end).
    """
    ran = _RAN.findall(output)
    if not ran:
        raise ValueError(f"no 'Ran N tests' line in tornado's output on {loop}:\n{output[-3000:]}")
    counts = {"failures": 0, "errors": 0, "skipped": 0, "expected failures": 0,
              "unexpected successes": 0}
    verdicts = _VERDICT.findall(output)
    if verdicts and verdicts[-1][1]:
        for part in verdicts[-1][1].split(","):
            key, _, value = part.strip().partition("=")
            counts[key] = int(value)
    failed = frozenset(_test_id(name, where) for kind, name, where in _HEADING.findall(output)
                       if kind in ("FAIL", "ERROR"))
    return SuiteResult(loop=loop, ran=int(ran[-1]), failures=counts["failures"],
                       errors=counts["errors"], skipped=counts["skipped"],
                       expected_failures=counts["expected failures"],
                       unexpected_successes=counts["unexpected successes"],
                       failed_ids=failed, returncode=returncode, seconds=seconds, output=output)


def run_suite(loop: str, *, timeout: float = TIMEOUT, python: str = sys.executable,
              tests: tuple[str, ...] = ()) -> SuiteResult:
    """Run tornado's whole suite on ``loop`` (a key of LOOPS) in a child process.

    ``tests`` (dotted unittest names, e.g. a SuiteResult's ``failed_ids``)
    runs only those instead of the whole suite.

    Returns its :class:`SuiteResult`.  Raises subprocess.TimeoutExpired after
    ``timeout`` seconds (the child is killed), ValueError if the child
    printed no report.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONASYNCIODEBUG", None)  # the suite runs as tornado's CI runs it
    start = time.monotonic()
    proc = subprocess.run([python, "-c", _CHILD.format(install=LOOPS[loop], tests=list(tests))],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout,
                          text=True, errors="replace")
    return parse_report(loop, proc.stdout, proc.returncode, time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run tornado's test suite on event loops.")
    parser.add_argument("loops", nargs="*", metavar="LOOP",
                        help=f"loops to run it on, of {', '.join(LOOPS)} (default: all)")
    parser.add_argument("--child", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--show", action="store_true", help="print each run's whole output")
    args = parser.parse_args(argv)
    if args.child:
        exec(_CHILD.format(install=LOOPS[args.child]), {"__name__": "__tornado_child__"})
        return 0
    unknown = set(args.loops) - set(LOOPS)
    if unknown:
        parser.error(f"unknown loop(s): {', '.join(sorted(unknown))}")
    for loop in args.loops or list(LOOPS):
        result = run_suite(loop)
        if args.show:
            print(result.output)
        print(f"{loop:8} ran {result.ran:4}  passed {result.passed:4}  failures {result.failures:3}"
              f"  errors {result.errors:3}  skipped {result.skipped:3}  ({result.seconds:.0f} s)",
              flush=True)
        for test_id in sorted(result.failed_ids):
            print(f"           failed: {test_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
