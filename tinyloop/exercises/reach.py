"""Which of an exercise's wider tests run the exercise's code.

The checker's wide step (tinyloop/exercises/checker.py) runs the suites of
every stage that imports the module a region is cut from.  Most of those
tests never execute the region: a conformance test of timers does not
write on a transport.  A test that does not run the student's code cannot
fail because of it, so it only makes the student wait.

This module measures, once, which tests do run it, and keeps the answer
next to the exercises (reach.json):

  * compute(): the reference file with a call to hit() put first in each
    of the exercise's regions, run through the whole wide suite as a
    student's file would be (TINYLOOP_OVERRIDE).  A hit in the pytest
    process counts for the test running; a hit in another process (a
    server a test started) is appended to a file with its time
    (CLOCK_MONOTONIC, one clock for every process) and counts for the test
    that was running then (both neighbours when it falls between two).
  * The pytest plugin (``-p tinyloop.exercises.reach``): with
    ``--tinyloop-reach-log`` it records each test's times for compute();
    with ``--tinyloop-reach NAME`` it deselects the tests reach.json says
    never ran NAME's code, and puts the HTTP suites last.

Rules this module keeps:
  * Staleness costs time, never strength.  What is stored is the tests
    seen NOT to reach the region, so a test added since is run; and each
    entry carries a digest of the region's reference text: when the region
    changed, the entry is ignored and every test runs
    (tests/test_exercise_reach.py fails until it is recomputed).
  * hit() does no blocking call in the pytest process (the conformance
    suite runs under blockbuster): there it only counts.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from tinyloop._override import ENV
from tinyloop.exercises import markers, outcomes
from tinyloop.exercises.model import Exercise

__all__ = ["DATA", "compute", "hit", "instrument", "load", "prepare", "region_digest", "selected"]

DATA = Path(__file__).with_name("reach.json")
_HITS = "TINYLOOP_REACH_HITS"  # file other processes append their hit times to
_PID = "TINYLOOP_REACH_PID"    # the pytest process, which counts in memory instead
# Bound now, before blockbuster can patch them: a process forked from a test
# under blockbuster writes its hits with these.
_open, _write = os.open, os.write
_hits_here = 0
_fd, _fd_pid = -1, -1


def hit(name: str) -> None:
    """Record that exercise ``name``'s region ran in this process, now.

    A no-op unless compute() set the environment; the instrumented reference
    calls it first in each region."""
    global _hits_here, _fd, _fd_pid
    path = os.environ.get(_HITS)
    if not path:
        return
    if os.environ.get(_PID) == str(os.getpid()):
        _hits_here += 1
        return
    if _fd_pid != os.getpid():  # opened once per process (a forked child opens its own)
        prepare()
    # Every hit, with no throttle: a test may run the region for a fraction
    # of a millisecond only, just after another test did.
    _write(_fd, f"{time.monotonic():.6f}\n".encode())


def prepare() -> None:
    """Open this process's hits file now, when the instrumented module is loaded.

    A region may run only when the process is out of descriptors (the
    accept back-off's): opening the file, or importing this module, then
    fails with EMFILE, the region raises, and the test fails for the
    instrument's sake."""
    global _fd, _fd_pid
    path = os.environ.get(_HITS)
    if path and os.environ.get(_PID) != str(os.getpid()) and _fd_pid != os.getpid():
        _fd, _fd_pid = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), os.getpid()


def instrument(source: str, name: str) -> str:
    """``source`` (a file holding exercise ``name``'s regions, markers kept) with a
    call to :func:`hit` as the first statement of each region, and one to
    :func:`prepare` at its end (module level: run when it is loaded)."""
    lines = source.splitlines(keepends=True)
    for region in sorted(markers.find_regions(source), key=lambda r: -r.begin):
        if region.name == name:
            lines.insert(region.begin, f'{region.indent}__import__("tinyloop.exercises.reach", '
                                       f'fromlist=["hit"]).hit({name!r})\n')
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    lines.append('__import__("tinyloop.exercises.reach", fromlist=["prepare"]).prepare()\n')
    return "".join(lines)


def region_digest(exercise: Exercise) -> str:
    """SHA-256 (hex) of the reference's lines in ``exercise``'s regions, markers included."""
    text = markers.source_path(exercise.module).read_text(encoding="utf-8")
    lines = text.splitlines()
    digest = hashlib.sha256()
    for region in markers.find_regions(text):
        if region.name == exercise.name:
            digest.update("\n".join(lines[region.begin - 1:region.end]).encode() + b"\n\0")
    return digest.hexdigest()


def load() -> dict[str, dict]:
    """reach.json: ``{exercise: {"region": digest, "unreached": [node ids], ...}}``."""
    try:
        return json.loads(DATA.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def selected(exercise: Exercise, node_ids: Iterable[str], data: dict | None = None) -> list[str]:
    """The ``node_ids`` the wide step runs: all but those reach.json shows never ran the
    exercise's code, or all of them when its entry is missing or its region changed."""
    entry = (data if data is not None else load()).get(exercise.name)
    node_ids = list(node_ids)
    if not entry or entry.get("region") != region_digest(exercise):
        return node_ids
    unreached = set(entry["unreached"])
    return [n for n in node_ids if n not in unreached]


def _rank(node_id: str) -> int:
    """The behaviour and unit tests first, then the conformance suite, then the tests
    that start servers (the HTTP suite, the limits tests): cheapest failures first."""
    if node_id.startswith(("tests/test_servers.py", "tests/test_limits.py")):
        return 2
    return 1 if node_id.startswith("tests/conformance/") else 0


# -- the pytest plugin ---------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tinyloop-reach")
    group.addoption("--tinyloop-reach", metavar="EXERCISE",
                    help="run only the tests that reach EXERCISE's code (reach.json), cheapest first")
    group.addoption("--tinyloop-reach-log", metavar="FILE",
                    help="record each test's times and in-process hits (reach.compute)")
    group.addoption("--tinyloop-wait", metavar="FILE",
                    help="after collecting, wait until FILE exists before the first test "
                         "(the checker collects its wide step while the exercise's own tests run)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--tinyloop-reach-log"):
        os.environ[_PID] = str(os.getpid())


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    name = config.getoption("--tinyloop-reach")
    if not name:
        return
    from tinyloop.exercises import catalog
    try:
        exercise = catalog.get(name)
    except KeyError:  # not the book's (a test's own exercise): every test, in order
        keep = {item.nodeid for item in items}
    else:
        keep = set(selected(exercise, (item.nodeid for item in items)))
        keep -= _other_stages(exercise, [item for item in items if item.nodeid in keep])
        keep |= {item.nodeid for item in items if outcomes.is_canary(item.nodeid)}  # the checker's own
    dropped = [item for item in items if item.nodeid not in keep]
    items[:] = sorted((item for item in items if item.nodeid in keep),
                      key=lambda i: (outcomes.is_canary(i.nodeid), _rank(i.nodeid)))
    if dropped:
        config.hook.pytest_deselected(items=dropped)


# The per-stage suites whose rows ask every stage's server the same thing, and
# the name of their stage parameter.
_PER_STAGE = {"tests/test_servers.py": "server", "tests/test_limits.py": "stage"}


def _other_stages(exercise: Exercise, items: list[pytest.Item]) -> set[str]:
    """The per-stage suites' rows to leave out (the HTTP suite, the limits tests):
    each of their tests runs on one stage, the exercise's own when that row
    reaches the code, else the first that does.

    Those suites ask every stage's server the same requests; the stages differ
    in reference code, not in the student's, and the exercise's own behaviour
    tests and the loop properties have run on its stage already.  What this
    leaves out was measured by mutation (scripts/mutation.py): no mutant killed
    with every row survives with one."""
    rows: dict[str, list[tuple[str, str]]] = {}  # test -> (node id, stage) of each row
    for item in items:
        parameter = _PER_STAGE.get(item.nodeid.partition("::")[0], "")
        stage = getattr(getattr(item, "callspec", None), "params", {}).get(parameter)
        if stage is not None:
            rows.setdefault(item.nodeid.partition("[")[0], []).append((item.nodeid, stage))
    left_out = set()
    for same_test in rows.values():
        own = [row for row in same_test if row[1] == exercise.stage]
        kept = (own or same_test)[0]
        left_out.update(node for node, _ in same_test if node != kept[0])
    return left_out


# How long --tinyloop-wait waits at most (s): the checker's own step is
# limited to 300 s; past this the run is an orphan and ends.
WAIT_LIMIT = 900.0


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    go = session.config.getoption("--tinyloop-wait")
    if not go:
        return
    parent, deadline = os.getppid(), time.monotonic() + WAIT_LIMIT
    while not os.path.exists(go):
        # A parent gone (the check was killed) leaves nobody to say go.
        if os.getppid() != parent or time.monotonic() > deadline:
            pytest.exit("the checker that started this run is gone", returncode=3)
        time.sleep(0.01)


_failed: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _failed.add(report.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    log = item.config.getoption("--tinyloop-reach-log")
    if not log:
        yield
        return
    before, start = _hits_here, time.monotonic()
    yield
    record = {"id": item.nodeid, "start": start, "end": time.monotonic(), "hits": _hits_here - before,
              "failed": item.nodeid in _failed}
    with open(log, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


# -- computing reach.json ------------------------------------------------------

def attribute(tests: list[dict], times: list[float]) -> set[str]:
    """The ids of ``tests`` (records of the log, in run order) that reached the region:
    a hit of their own, or a hit time of another process inside their span (both
    neighbours for one between two tests).  A test that failed counts as reached
    (it may have stopped before the region: it stays in the wide step)."""
    reached = {t["id"] for t in tests if t["hits"] or t.get("failed")}
    starts = [t["start"] for t in tests]
    for moment in times:
        i = bisect.bisect_right(starts, moment) - 1
        if i >= 0:
            reached.add(tests[i]["id"])
        if (i < 0 or moment > tests[i]["end"]) and i + 1 < len(tests):
            reached.add(tests[i + 1]["id"])
    return reached


def compute(exercise: Exercise, root: Path, timeout: float = 1800.0) -> dict:
    """Run ``exercise``'s wide tests (checker.wider_test_arguments, every one: no -x)
    with the instrumented reference; the entry reach.json keeps for it.

    Raises RuntimeError when pytest could not run the tests (exit code above 1)."""
    from tinyloop.exercises import build, checker
    arguments = [a for a in checker.wider_test_arguments(exercise, root) if a != "-x"]
    source = markers.source_path(exercise.module)
    with tempfile.TemporaryDirectory(prefix="tinyloop-reach-") as tmp:
        student = Path(tmp) / source.name
        student.write_text(instrument(markers.reference(exercise, student.name), exercise.name),
                           encoding="utf-8")
        replaced = f"{exercise.module}={student}"
        if exercise.extension:  # Cython: the extension built with the instrumented file
            made = build.build(exercise, student, root)
            if made.module is None:
                raise RuntimeError(f"{exercise.name}: the instrumented file does not build: {made.errors}")
            replaced = f"{exercise.extension}={made.module}"
        log, hits = Path(tmp) / "log", Path(tmp) / "hits"
        env = {**os.environ, ENV: replaced, _HITS: str(hits),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-c", checker.PYTEST_MAIN, "-q", "-p", "no:cacheprovider",
                               "-p", "tinyloop.exercises.reach", f"--tinyloop-reach-log={log}",
                               "-o", "timeout=60", *arguments],
                              cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if done.returncode not in (0, 1) or not log.exists():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise RuntimeError(f"{exercise.name}: pytest did not run the wide tests "
                               f"(exit {done.returncode}):\n{tail}")
        tests = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        times = sorted(float(x) for x in hits.read_text().split()) if hits.exists() else []
    reached = attribute(tests, times)
    every = [t["id"] for t in tests]
    return {"region": region_digest(exercise), "tests": len(every), "reached": len(reached),
            "failed": sorted(t["id"] for t in tests if t.get("failed")),
            "unreached": sorted(set(every) - reached)}


def main(argv: list[str] | None = None) -> int:
    from tinyloop.exercises import catalog, checker
    parser = argparse.ArgumentParser(prog="python -m tinyloop.exercises.reach",
                                     description="measure which wide tests run each exercise's code "
                                                 "and update tinyloop/exercises/reach.json")
    parser.add_argument("names", nargs="*", help="exercises (default: every one)")
    parser.add_argument("--stale", action="store_true", help="only those whose region changed")
    args = parser.parse_args(argv)
    root = checker.repository_root()
    data = load()
    chosen = [catalog.get(n) for n in args.names] if args.names else list(catalog.exercises())
    if args.stale:
        chosen = [e for e in chosen if data.get(e.name, {}).get("region") != region_digest(e)]
    for exercise in chosen:
        started = time.monotonic()
        data[exercise.name] = entry = compute(exercise, root)
        DATA.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n", encoding="utf-8")
        print(f"{exercise.name}: {entry['reached']} of {entry['tests']} tests run its code "
              f"({time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
