"""Grade a student's file for one exercise.

The checker trusts nothing it has not run.  In order, it asks:
  1. does the file compile?                        (compile(), in-process)
  2. is the exercise written at all?               (the placeholder is gone)
  3. does it define what the reference module does? (the right file was given)
  4. do the exercise's tests pass with it?         (pytest, in a subprocess:
     its own tests first, then the wider suites' tests that run its code,
     reach.py, each run stopped at the first failure)
  5. does the stage's server keep its loop properties with it?  (properties.py,
     measured while step 4's wider tests run, shown only if they pass)
and stops at the first step that fails, because later steps would only
repeat the same failure in a harder-to-read form.  (The loop properties
are all measured: each tells something the others do not.)  When tests
fail on a stage's server, the checker also runs that server once with the
file and shows the traceback it printed: a test sees only a closed socket.

Each test's outcome comes to the checker on a pipe it owns
(tinyloop/exercises/outcomes.py, a pytest plugin), never from a file the
tests' processes could write; a test still running well past pytest-timeout's
limit (stuck in C, where its signal does not reach Python) is stopped from
here and named.

Two ways to run the student's code:
  * for a student (``check``): the tests' processes write only in the
    check's temporary directory (TMPDIR points there);
    tinyloop/exercises/guard.py, installed at start-up in each of them,
    refuses to delete or overwrite a file outside it, and a refusal fails
    the check;
  * for credit (``sandboxed=True``, what ``grade`` runs): every process that
    runs the file starts in a sandbox (tinyloop/exercises/sandbox.py), and
    the test ids each run must report are collected beforehand, outside it,
    without the student's file.

The student's file replaces the reference module through TINYLOOP_OVERRIDE
(tinyloop/_override.py), set in the environment of the pytest run and of
every server process: in-process tests and servers started by tests, or by
step 5, all load the student's code under the reference module's name.

A Cython exercise (Part IV: ``Exercise.extension`` is set) cannot be
compiled by compile() nor loaded from its source: steps 1 and 3 read its
lines, a build step comes before the tests (tinyloop/exercises/build.py
compiles the extension with the student's file in a scratch copy), and
TINYLOOP_OVERRIDE then replaces the compiled module by that build.

Rules this module keeps:
  * Output fits on a screen: one line per step, at most a few failures with
    two lines each, and a last line that says PASSED or FAILED.
  * Messages speak of the student's file and line numbers, never of the
    checker's internals.
  * Every subprocess has a time limit.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import tinyloop
from tinyloop._override import ENV
from tinyloop.exercises import build, guard, markers, outcomes, properties, sandbox
from tinyloop.exercises.model import Exercise

__all__ = ["CheckerError", "Report", "Step", "check", "stop_session", "own_test_arguments", "repository_root",
           "stages_using", "test_arguments", "wider_test_arguments"]

# Time limits, in seconds: one test (pytest-timeout; a wrong solution often
# hangs, e.g. a server that resends its output forever), and the whole run.
TEST_TIMEOUT = 30.0
TESTS_TIMEOUT = 300.0
# A ceiling on the failures one run shows (pytest --maxfail); check() stops
# each run at the first (-x): a student fixes the first one, and a hanging
# test costs TEST_TIMEOUT each.
SHOW_FAILURES = 3
# The wide step's pytest options: the plugin that keeps only the tests that
# run the exercise's code (tinyloop/exercises/reach.py); the name follows.
REACH_OPTIONS = ("-p", "tinyloop.exercises.reach", "--tinyloop-reach")


class CheckerError(Exception):
    """The check cannot run at all (no such file, no source checkout): a usage error."""


@dataclass
class Step:
    """One line of the report: ``status`` is ``"ok"``, ``"FAIL"`` or ``"skip"``."""

    status: str
    text: str
    details: list[str] = field(default_factory=list)
    crashed: bool = False  # the test process died by a signal


@dataclass
class Report:
    """What :func:`check` found: ``passed`` is the verdict, ``render()`` the text to print."""

    exercise: Exercise
    path: Path
    steps: list[Step] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(step.status != "FAIL" for step in self.steps)

    def render(self) -> str:
        e = self.exercise
        lines = [f"check {e.name}: {e.title} (chapter {e.chapter})", f"file  {self.path}"]
        for step in self.steps:
            lines.append(f"{step.status:<5} {step.text}")
            lines += [f"        {detail}" for detail in step.details]
        lines.append("PASSED" if self.passed else "FAILED")
        return "\n".join(lines)


def repository_root() -> Path:
    """The source checkout tinyloop runs from: the directory holding ``tinyloop/`` and ``tests/``.

    Raises :class:`CheckerError` when ``tests/`` is not there (an installed copy).
    """
    root = Path(tinyloop.__file__).resolve().parent.parent
    if not (root / "tests").is_dir():
        raise CheckerError(f"the checker runs the book's tests, and there is no tests/ directory "
                           f"beside the tinyloop package in {root}; it needs a source checkout "
                           "(clone the repository and `pip install -e .` in it)")
    return root


def check(exercise: Exercise, path: str | os.PathLike[str], *, quick: bool = False,
          root: Path | None = None, stop_when_unwritten: bool = True,
          verdict_only: bool = False, sandboxed: bool = False,
          collect_first: bool | None = None, overlap: bool = True) -> Report:
    """Grade the file ``path`` as a solution to ``exercise``.

    ``quick`` measures the loop properties with smaller counts (for the test
    suite).  ``root`` is where the exercise's tests are found (default: the
    source checkout, :func:`repository_root`).  ``stop_when_unwritten=False``
    runs the tests even on an untouched starter (the test suite uses it to
    prove the tests catch one); ``verdict_only`` skips the diagnosis of a
    failure (running the server once more for its traceback): the same
    PASSED or FAILED, sooner (the mutation runner).  ``sandboxed`` runs every
    process that runs the file in a sandbox (tinyloop/exercises/sandbox.py)
    and takes the verdict only from what the parent knows: the tests it
    collected itself, without the file, and the outcomes each reported on
    its pipe (tinyloop/exercises/outcomes.py); without it, the audit-hook
    guard (tinyloop/exercises/guard.py) watches the file's processes.
    ``collect_first`` (default: ``sandboxed``) takes the test ids from that
    collection rather than from the test process (grading for credit
    unsandboxed: ``grade --unsandboxed``); a second or two more per run.
    ``overlap`` (a student's check) starts the wider suites' pytest while the
    exercise's own tests run, and measures the loop properties while the
    wider tests run: the verdict sooner, on both cores.  ``overlap=False``
    (grade, whose parallelism is across checks) runs each step after the
    one before, and only when it passed: one core per check, no work spent
    on a step a failure makes moot.  The verdict is the same either way.
    Raises :class:`CheckerError` if ``path`` does not exist, there is no
    checkout, or ``sandboxed`` and no sandbox can be built here.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise CheckerError(f"there is no file {path}; write the starter with "
                           f"`{markers.python_command()} -m tinyloop start {exercise.name}`")
    root = root if root is not None else repository_root()
    if sandboxed and (why := sandbox.available()) is not None:
        raise CheckerError(f"cannot run the check in a sandbox: {why}")
    report = Report(exercise, path)
    try:
        text = path.read_text()
    except UnicodeDecodeError as error:
        report.steps.append(Step("FAIL", f"your file is not UTF-8 text (byte {error.start})"))
        return report
    cython = exercise.extension is not None
    first = [] if cython else [_compiles]
    defines = _defines_cython if cython else _defines
    steps = [*first, _written, defines] if stop_when_unwritten else [*first, defines]
    for step_check in steps:
        step = step_check(exercise, path, text)
        report.steps.append(step)
        if step.status == "FAIL":
            return report
    replaced, shown = f"{exercise.module}={path}", path
    if cython:
        step, module = _build(exercise, path, root, sandboxed)
        report.steps.append(step)
        if module is None:
            return report
        assert exercise.extension is not None
        replaced = f"{exercise.extension}={module}"
        # Cython names its source in tracebacks as the build saw it
        # (tinyloop/uv/tcp.pyx): those lines are the student's file's.
        shown = build.sources(exercise)[1].relative_to(root)
    # Everything the tests write goes into one temporary directory: the
    # sandbox's private tmp, or (unsandboxed) this one, outside which the
    # guard refuses to delete or overwrite anything.
    with tempfile.TemporaryDirectory(prefix="tl-check-", ignore_cleanup_errors=True) as name:
        scratch = Path(name)
        if sandboxed:
            # The sandbox sees this folder read-only at sandbox.FOLDER: a copy of
            # the file its user can read (the original may be in a private
            # folder), and the go file of a waiting run.
            scratch.chmod(0o755)
            if not cython:
                copy = scratch / path.name
                copy.write_bytes(path.read_bytes())
                copy.chmod(0o644)
                replaced = f"{exercise.module}={sandbox.FOLDER}/{path.name}"
                shown = Path(sandbox.FOLDER) / path.name
        _run_steps(report, exercise, text, replaced, shown, root, scratch, quick, verdict_only, sandboxed,
                   sandboxed if collect_first is None else collect_first, overlap)
    return report


def _run_steps(report: Report, exercise: Exercise, text: str, replaced: str, shown: Path, root: Path,
               scratch: Path, quick: bool, verdict_only: bool, sandboxed: bool,
               collect_first: bool, overlap: bool = True) -> None:
    """The test steps of :func:`check` (4 and 5), in ``report``: the file is ``replaced``
    (TINYLOOP_OVERRIDE's value), shown in messages as ``shown``; ``scratch`` is the
    check's temporary directory (sandboxed: the folder the sandbox sees read-only)."""
    cython = exercise.extension is not None
    package_parent = str(Path(tinyloop.__file__).resolve().parent.parent)
    guard_log = None if sandboxed else scratch / "guard.log"
    override = {
        ENV: replaced,
        # Tests and servers import this very tinyloop, whatever else is
        # installed; unsandboxed, first the start-up module that installs the guard.
        "PYTHONPATH": os.pathsep.join(filter(None, [None if sandboxed else str(GUARD_STARTUP),
                                                    package_parent, os.environ.get("PYTHONPATH")])),
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ beside the student's file
    }
    if sandboxed:  # its /tmp is private, and is TMPDIR and HOME (sandbox.command)
        override["HYPOTHESIS_STORAGE_DIRECTORY"] = "/tmp/hypothesis"
    else:
        override.update({
            "TMPDIR": str(scratch),  # tempfile's and pytest's tmp_path's
            # hypothesis keeps a cache (.hypothesis/ in the working directory);
            # the stream properties keep no examples (database=None).
            "HYPOTHESIS_STORAGE_DIRECTORY": str(scratch / "hypothesis"),
            guard.ENV: str(scratch),
            guard.LOG_ENV: str(guard_log),
        })
    # Fast feedback: the exercise's own tests (its behaviour tests and the
    # stream-integrity properties, a few seconds) first, stopping at the
    # first failure; the wider suites only once those pass, and of those only
    # the tests that run the exercise's code (tinyloop/exercises/reach.py),
    # cheapest first, stopping at the first failure too: a student fixes one
    # failure at a time.
    # Overlapping, the wide step's pytest starts now, with the exercise's own
    # tests: it imports and collects meanwhile (seconds, on the other core)
    # and waits before its first test until those pass; if they fail it is
    # stopped.  Not overlapping, it starts once they pass.
    own = own_test_arguments(exercise, root)

    def start_wide(wait: bool) -> _Session:
        return _start_tests(root, override, ["-x", *WIDE_UNUSED_PLUGINS, *REACH_OPTIONS, exercise.name],
                            wider_test_arguments(exercise, root), scratch, wait=wait, sandboxed=sandboxed,
                            collect_first=collect_first)

    wide = start_wide(True) if overlap else None
    limits = properties.QUICK if quick else properties.FULL
    measured: list[properties.Result] = []
    try:
        # Hypothesis only where the stream properties are among them.
        options = ["-x", *(UNUSED_PLUGINS if STREAM_TESTS in own else WIDE_UNUSED_PLUGINS)]
        step = (_finish_tests(_start_tests(root, override, options, own, scratch, sandboxed=sandboxed,
                                           collect_first=collect_first),
                              exercise, shown, root, own=True) if own else None)
        if step is not None:
            report.steps.append(step)
        refused = _refused(guard_log)
        if refused is not None:
            report.steps.append(refused)
            return
        if step is None or step.status != "FAIL":
            # The loop properties are measured on servers of their own, while
            # the wide tests run (each waits mostly on sockets) when
            # overlapping, else once they pass; shown only if those pass.
            measure = None
            if exercise.stage and exercise.properties:
                stage, names = exercise.stage, exercise.properties
                measure = ((lambda: _measure_sandboxed(stage, names, override, limits, scratch)) if sandboxed
                           else (lambda: properties.check(stage, names, env=override, limits=limits)))
            measuring = None
            if measure is not None and overlap:
                measuring = threading.Thread(target=lambda: measured.extend(measure()), daemon=True)
                measuring.start()
            if wide is None:
                wide = start_wide(False)
            step = _finish_tests(wide, exercise, shown, root)
            report.steps.append(step)
            if measuring is not None:
                measuring.join()
            elif measure is not None and step.status != "FAIL":
                measured.extend(measure())
    finally:
        if wide is not None:
            wide.stop()
    refused = _refused(guard_log)
    if refused is not None:
        report.steps.append(refused)
        return
    if step.status == "FAIL" and exercise.stage and not verdict_only and not step.crashed:
        traceback = (_crash_sandboxed(exercise.stage, override, limits, scratch) if sandboxed
                     else properties.crash(exercise.stage, env=override, limits=limits))
        if traceback:
            step.details += _explain_crash(exercise, shown, traceback, text if cython else None)
    if exercise.stage and exercise.properties:
        if step.status == "FAIL" or not measured:
            report.steps.append(Step("skip", "loop properties: measured once the tests pass"))
        else:
            for result in measured:
                report.steps.append(Step("ok" if result.passed else "FAIL",
                                         f"{result.name}: {result.message}"))


# How long the loop properties may take in all, measured in a sandbox (s).
PROPERTIES_TIMEOUT = 240.0


def _in_sandbox(arguments: list[str], override: dict[str, str], scratch: Path,
                timeout: float) -> dict | None:
    """Run ``python -m tinyloop.exercises.properties ARGUMENTS`` in a sandbox and return
    the JSON it wrote on its pipe, or None (it wrote none within ``timeout`` s)."""
    read, write = os.pipe()
    try:
        with open(os.devnull, "wb") as null:
            proc = sandbox.popen([sys.executable, "-m", "tinyloop.exercises.properties", *arguments,
                                  "--report-fd", str(write), "--env", json.dumps(override)],
                                 folder=scratch, env=_sandbox_env({}), pass_fds=(write,),
                                 stdout=null, stderr=null)
        os.close(write)
        write = -1
        got = bytearray()
        reader = threading.Thread(target=lambda: _read_all(read, got), daemon=True)
        reader.start()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        stop_session(proc, grace=0)  # the sandbox, and every process in it
        reader.join(5)
        try:
            return json.loads(bytes(got)) if not reader.is_alive() else None
        except ValueError:
            return None
    finally:
        for fd in (read, write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _read_all(fd: int, into: bytearray, limit: int = 1 << 20) -> None:
    while len(into) < limit:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        into += chunk


def _measure_sandboxed(stage: str, names: tuple[str, ...], override: dict[str, str],
                       limits: properties.Limits, scratch: Path) -> list[properties.Result]:
    """:func:`properties.check` run in a sandbox of its own (its servers, and the
    measurer that connects to them on the sandbox's loopback)."""
    quick = ["--quick"] if limits == properties.QUICK else []
    data = _in_sandbox([stage, *names, *quick], override, scratch, PROPERTIES_TIMEOUT)
    found = {}
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        found = {r[0]: properties.Result(str(r[0]), r[1] is True, str(r[2]))
                 for r in data["results"] if isinstance(r, list) and len(r) == 3}
    return [found.get(name) or properties.Result(
        name, False, f"the measurement did not report within {PROPERTIES_TIMEOUT:g} s "
        "(a server that does not stop, or that stopped the measurer)") for name in names]


def _crash_sandboxed(stage: str, override: dict[str, str], limits: properties.Limits,
                     scratch: Path) -> str | None:
    """:func:`properties.crash` run in a sandbox of its own."""
    data = _in_sandbox([stage, "--crash"], override, scratch, 60.0)
    traceback = data.get("crash") if isinstance(data, dict) else None
    return traceback if isinstance(traceback, str) else None


def _sandbox_env(override: dict[str, str]) -> dict[str, str]:
    """The whole environment of a sandboxed process: the search path and locale of
    this one, then ``override``; nothing else of the grader's leaks in."""
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TERM") if k in os.environ}
    return {**keep, "PYTHONDONTWRITEBYTECODE": "1", **override}


# The directory whose sitecustomize.py installs the guard in every process
# started with the check's environment (it goes first on PYTHONPATH).
GUARD_STARTUP = Path(guard.__file__).resolve().with_name("startup")


def _refused(log: Path | None) -> Step | None:
    """A FAIL step if the guard refused anything during the check (``log``; None in a
    sandbox, which has no guard), else None."""
    refusals = guard.refused(log) if log is not None else []
    if not refusals:
        return None
    verb, path = refusals[0]
    details = ["the checker refused it (a PermissionError), so it is still there: a check may",
               "delete or overwrite files only in its own temporary directory (tempfile, tmp_path)"]
    others = sorted({p for _, p in refusals[1:]} - {path})
    if others:
        details.append(_clip(f"and {len(others)} more: {', '.join(others)}"))
    return Step("FAIL", _clip(f"your code tried to {verb} {path}, outside the check's temporary "
                              "directory", 160), details)


def stages_using(module: str, names: set[str] | None = None) -> list[str]:
    """The stages (names, in the stage table's order) whose server runs code of
    ``module``: the stage's own module is it, or imports it, directly or through
    other tinyloop modules.  With ``names`` (top-level names of ``module``), a
    ``from module import x`` counts only when ``x`` is one of them.

    Found by reading the imports (``ast``), never by importing: the check runs
    on a student's file, which may not import.
    """
    from tinyloop import stages
    found = []
    for stage in stages.STAGES:
        for importer, target, name in _imports_from(stage.module):
            if importer == module or (target == module and (names is None or name is None
                                                            or name in names)):
                found.append(stage.name)
                break
    return found


def _imports_from(start: str) -> list[tuple[str, str, str | None]]:
    """``(importer, module, name)`` for every tinyloop import made by ``start`` and the
    tinyloop modules it imports, transitively; ``name`` None for a whole module.
    ``start`` itself appears as ``(start, start, None)``."""
    edges: list[tuple[str, str, str | None]] = [(start, start, None)]
    seen: set[str] = set()
    pending = [start]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for target, imported in _module_imports(name):
            edges.append((name, target, imported))
            pending.append(target)
    return edges


@functools.lru_cache(maxsize=None)
def _module_imports(name: str) -> tuple[tuple[str, str | None], ...]:
    """``(module, name)`` for each tinyloop import in reference module ``name``'s
    source (:func:`_imports_from`'s edges from it); empty for a Cython file or a
    module not found.  Cached: the reference's sources do not change during a
    check, and each stage's walk reads mostly the same modules (a second or two
    per check on the shared machine, uncached)."""
    try:
        path = markers.source_path(name)
    except (ModuleNotFoundError, ImportError, ValueError):
        return ()
    if path.suffix != ".py":  # Cython: its imports are the extension's, read no further
        return ()
    edges = []
    for node in _statements(markers.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            found = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from tinyloop.callbacks import loop": loop may be a module itself.
            found = [(node.module, alias.name) for alias in node.names]
            found += [(f"{node.module}.{alias.name}", None) for alias in node.names]
        else:
            continue
        edges += [(target, imported) for target, imported in found if target.split(".")[0] == "tinyloop"]
    return tuple(edges)


def _statements(body: list[ast.stmt]):
    """Every statement in ``body`` and the blocks nested in it (functions, classes,
    ``if``, ``try``...), not the expressions: an import is a statement, and
    walking only these is several times faster than ``ast.walk``."""
    pending = list(body)
    while pending:
        node = pending.pop()
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                pending += [n for n in block if isinstance(n, (ast.stmt, ast.excepthandler, ast.match_case))]


@functools.lru_cache(maxsize=None)
def _users(exercise: Exercise) -> list[str]:
    """The stages whose server runs the exercise's code (:func:`stages_using`): for a
    Cython exercise, every stage that imports the extension it is built into."""
    if exercise.extension:
        return stages_using(exercise.extension)
    return stages_using(exercise.module, _region_owners(exercise))


def _region_owners(exercise: Exercise) -> set[str]:
    """The top-level names (class, function) of the reference module that hold the
    exercise's regions."""
    text = markers.source_path(exercise.module).read_text(encoding="utf-8")
    lines = [r.begin for r in markers.find_regions(text) if r.name == exercise.name]
    owners = set()
    for node in markers.parse(text).body:
        end = getattr(node, "end_lineno", node.lineno)
        if any(node.lineno <= line <= end for line in lines):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                owners.add(node.name)
    return owners


def test_arguments(exercise: Exercise, root: Path | None = None) -> list[str]:
    """The pytest arguments that grade ``exercise``: the catalog's, widened to

    * the exercise's own behaviour tests, ``tests/test_exercise_<chapter>.py``
      (tests named after the exercise, ``test_<name with _>_...``), whose
      messages speak the exercise's words, run first;
    * the HTTP suite (``tests/test_servers.py``) of every stage whose server
      imports the module the region is cut from (:func:`stages_using`): a
      region of ``raw/connection.py`` breaks the callbacks server too.

    The catalog's ``-k`` expression is kept, or-ed with what selects those,
    less uvloop's rows (a peer's, which never run the student's code).
    """
    root = root if root is not None else repository_root()
    files, expression, others = [], None, []
    args = list(exercise.tests)
    while args:
        arg = args.pop(0)
        if arg == "-k" and args:
            expression = args.pop(0)
        elif arg.startswith("-"):
            others.append(arg)
        else:
            files.append(arg)
    own = f"tests/test_exercise_{exercise.chapter}.py"
    wanted = [f"test_{exercise.name.replace('-', '_')}"]
    if (root / own).exists() and own not in files:
        files.insert(0, own)
    if expression is None:
        return others + files  # without -k every test of the files runs, ours included
    if (root / "tests/test_servers.py").exists():
        users = _users(exercise)
        if users and "tests/test_servers.py" not in files:
            files.append("tests/test_servers.py")
        # A Cython exercise's stages are uv and uv-streams: "[uv]", pytest's
        # parameter id, because "uv" alone would select uvloop's rows too.
        if exercise.extension:
            wanted += [f"[{user}]" for user in users if f"[{user}]" not in expression]
        else:
            wanted += users
    # uvloop's rows (the conformance suite's peer) never run a student's code.
    return others + files + ["-k", f"(({expression}) or {' or '.join(wanted)}) and not uvloop"]


# The stream-integrity properties of every exercise on a write or read path
# (exactly the bytes written, in order, once), named test_<exercise>_... too.
STREAM_TESTS = "tests/test_exercise_streams.py"


def own_test_arguments(exercise: Exercise, root: Path | None = None) -> list[str]:
    """The pytest arguments of the exercise's own tests, which run first: the tests
    named ``test_<name with _>_...`` in ``tests/test_exercise_<chapter>.py`` and in
    :data:`STREAM_TESTS`; an empty list when neither file defines one.

    A file with none is left out: collecting it costs its imports (the stream
    properties' hypothesis, a second on a shared machine) for nothing."""
    root = root if root is not None else repository_root()
    prefix = f"test_{exercise.name.replace('-', '_')}"
    files = [f for f in _own_files(exercise, root)
             if re.search(rf"^\s*(?:async\s+)?def {prefix}\w*\(", (root / f).read_text(encoding="utf-8"), re.M)]
    return files + ["-k", prefix] if files else []


def _own_files(exercise: Exercise, root: Path) -> list[str]:
    """The files that may hold ``exercise``'s own tests (they exist)."""
    return [f for f in (f"tests/test_exercise_{exercise.chapter}.py", STREAM_TESTS) if (root / f).exists()]


def wider_test_arguments(exercise: Exercise, root: Path | None = None) -> list[str]:
    """:func:`test_arguments` less the exercise's own test files (they ran first)."""
    root = root if root is not None else repository_root()
    own = set(_own_files(exercise, root))
    args = test_arguments(exercise, root)
    return [a for i, a in enumerate(args)
            if not (a in own and a.startswith("tests/") and (i == 0 or args[i - 1] != "-k"))]


def _compiles(exercise: Exercise, path: Path, text: str) -> Step:
    try:
        compile(text, str(path), "exec")
    except SyntaxError as error:
        details = []
        if error.text and error.text.strip():
            code = error.text.rstrip("\n")
            indent = len(code) - len(code.lstrip())
            details.append(code.strip())
            if error.offset and error.offset > indent:
                details.append(" " * (error.offset - 1 - indent) + "^")
        return Step("FAIL", f"your file does not compile: line {error.lineno}: {error.msg}", details)
    return Step("ok", "the file compiles")


def _written(exercise: Exercise, path: Path, text: str) -> Step:
    lines = markers.unwritten_lines(text, exercise.name)
    if not lines:
        return Step("ok", "the exercise is written")
    where = ", ".join(map(str, lines))
    return Step("FAIL", f"not written yet: line{'s' * (len(lines) > 1)} {where} still "
                f"raise{'s' * (len(lines) == 1)} NotImplementedError",
                ["write your code there, between the markers, and delete that line"])


def _defines(exercise: Exercise, path: Path, text: str) -> Step:
    reference = markers.source_path(exercise.module).read_text()
    missing = sorted(_public_names(markers.parse(reference)) - _bound_names(markers.parse(text)))
    if not missing:
        return Step("ok", f"it defines what {exercise.module} does")
    return Step("FAIL", f"your file does not define {', '.join(missing)}, which "
                f"{exercise.module} defines",
                [f"is it the file `{markers.python_command()} -m tinyloop start {exercise.name}` wrote?"])


# Top-level names of a Cython file: def f, class C, cdef class C, and a cdef
# or cpdef function (its return type, if any, stands before the name).
_CYTHON_NAME = re.compile(
    r"^(?:async\s+def|def|class|c(?:p)?def\s+(?:(?:public|readonly|inline|api|final)\s+)*class"
    r"|c(?:p)?def\s+(?!class\b)(?:[\w.\[\]]+[\s*]+)*?)\s*(?P<name>[A-Za-z_]\w*)\s*[(:]", re.M)


def _cython_names(text: str) -> set[str]:
    return {match["name"] for match in _CYTHON_NAME.finditer(text)}


def _defines_cython(exercise: Exercise, path: Path, text: str) -> Step:
    # Cython has no ast here: compare the names defined at the left margin.
    source = markers.source_path(exercise.module)
    missing = sorted(_cython_names(source.read_text()) - _cython_names(text))
    if not missing:
        return Step("ok", f"it defines what {source.name} does")
    return Step("FAIL", f"your file does not define {', '.join(missing[:5])}, which "
                f"{source.name} defines",
                [f"is it the file `{markers.python_command()} -m tinyloop start {exercise.name}` wrote?"])


def _build(exercise: Exercise, path: Path, root: Path, sandboxed: bool = False) -> tuple[Step, Path | None]:
    source = markers.source_path(exercise.module).name
    made = build.build(exercise, path, root, sandboxed=sandboxed)
    if made.module is None:
        return Step("FAIL", f"{exercise.extension} does not build with your file as {source}",
                    made.errors), None
    cached = " (built before: the same file)" if made.cached else ""
    return Step("ok", f"{exercise.extension} builds with your file as {source}{cached}"), made.module


def _public_names(tree: ast.Module) -> set[str]:
    """The names a module exports: its ``__all__`` if it is a literal, else its public names."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                 for t in node.targets)):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                break
    return {name for name in _bound_names(tree) if not name.startswith("_")}


def _bound_names(tree: ast.Module) -> set[str]:
    """Names bound at module level (also inside top-level ``if``/``try``/``with``)."""
    names: set[str] = set()
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        else:
            for name in ("body", "orelse", "finalbody", "handlers"):
                pending += getattr(node, name, [])
    return names


# The pytest process applies the override before anything can import the
# reference module, then runs pytest.
def stop_session(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop ``proc``, started with ``start_new_session=True``, and all it left.

    ``grace`` (seconds): how long SIGTERM has to work before SIGKILL goes to
    what is left of the group; 0 sends SIGKILL at once.  A check given
    SIGTERM stops its own test session on the way out (the ``check`` command
    turns SIGTERM into an exit), which SIGKILL would orphan: the tests run in
    a session of their own, out of reach of a signal to the check's group.
    Waits for ``proc``; never raises.
    """
    if grace > 0:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group is empty: everything stopped by itself


PYTEST_MAIN = """\
import signal, sys
from tinyloop._override import apply_override
# Ctrl-C as in any Python program, even when the check was started with
# SIGINT ignored (a background job of a shell, some CI runners): the tests
# of Ctrl-C would fail on every file, the reference's too.
signal.signal(signal.SIGINT, signal.default_int_handler)
# The outcome pipe (tinyloop/exercises/outcomes.py) is closed on exec from
# the start: no program the student's module starts when loaded holds it.
import os
if os.environ.get("TINYLOOP_OUTCOME_FD", "").isdigit():
    os.set_inheritable(int(os.environ["TINYLOOP_OUTCOME_FD"]), False)
apply_override()
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


# pytest plugins the checker's runs never use, left out because each run
# would import them first (a second or more per run on a shared 2-core
# machine): xdist (one process), anyio, platformdirs.  Hypothesis is loaded
# only where a test uses it, in the exercise's own tests (the stream
# properties); no wide suite does.
UNUSED_PLUGINS = ("-p", "no:xdist", "-p", "no:xdist.looponfail", "-p", "no:anyio", "-p", "no:platformdirs")
WIDE_UNUSED_PLUGINS = (*UNUSED_PLUGINS, "-p", "no:hypothesispytest")


@dataclass
class _Session:
    """A pytest run started by :func:`_start_tests`, in its own process group (or sandbox)."""

    proc: subprocess.Popen
    tmp: tempfile.TemporaryDirectory
    go: Path | None  # the file the run waits for before its first test (None: no wait)
    channel: outcomes.Channel
    expected: _Expected | None  # the test ids, collected without the file (None: as reported)
    sandboxed: bool
    canary: outcomes.Canary | None = None  # for credit: the test that must fail, run last
    stopped: bool = False

    @property
    def folder(self) -> Path:
        return Path(self.tmp.name)

    def start(self) -> None:
        """Let a run started with ``wait=True`` go on to its tests."""
        if self.go is not None:
            self.go.touch()

    def stop(self) -> None:
        """Stop the run and what it started (the servers its tests left); remove its
        files.  Idempotent."""
        if not self.stopped:
            self.stopped = True
            stop_session(self.proc, grace=0)
            self.channel.finish()
            if self.expected is not None:
                self.expected.cancel()
            self.tmp.cleanup()


class _Expected:
    """The test ids a run must report, collected in a thread by a pytest of the
    reference code (no student file: ``--collect-only`` with the run's own
    options and arguments, so the reach plugin deselects the same tests)."""

    _cache: dict[tuple, list[str]] = {}
    _lock = threading.Lock()

    def __init__(self, root: Path, options: list[str], arguments: list[str]) -> None:
        self.key = (str(root), tuple(options), tuple(arguments))
        self.ids: list[str] | None = None
        self.error = ""
        self._proc: subprocess.Popen | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._collect, args=(root, options, arguments), daemon=True)
        self._thread.start()

    def _collect(self, root: Path, options: list[str], arguments: list[str]) -> None:
        with self._lock:
            cached = self._cache.get(self.key)
        if cached is not None:
            self.ids = cached
            return
        stored = _ids_file(root, self.key)
        try:
            cached = json.loads(stored.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        else:
            with self._lock:
                self._cache[self.key] = self.ids = [str(i) for i in cached]
            return
        options = [o for o in options if o != "-x"]
        with self._lock:
            if self._cancelled:
                return
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                     *options, *arguments], cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True,
                    env={**{k: v for k, v in os.environ.items() if k != ENV}, "PYTHONDONTWRITEBYTECODE": "1"})
            except OSError as error:
                self.error = str(error)
                return
        try:
            output, _ = self._proc.communicate(timeout=TESTS_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            self.error = f"collecting took more than {TESTS_TIMEOUT:g} s"
            return
        if self._proc.returncode not in (0, 5):
            self.error = properties.last_line(output)
            return
        ids = [line for line in output.splitlines() if "::" in line and not line.startswith(" ")]
        with self._lock:
            self._cache[self.key] = ids
        self.ids = ids
        try:  # for the next check, in another process (grade runs each check in one)
            stored.parent.mkdir(parents=True, exist_ok=True)
            partial = stored.with_name(f".{os.getpid()}-{threading.get_ident()}-{stored.name}")
            partial.write_text(json.dumps(ids), encoding="utf-8")
            partial.replace(stored)
        except OSError:
            pass

    def get(self) -> list[str] | None:
        """The ids (waits for the collection), or None if it failed (see ``error``)."""
        self._thread.join()
        return self.ids

    def cancel(self) -> None:
        """Stop collecting (the run is over before its ids were needed)."""
        with self._lock:
            self._cancelled = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
        self._thread.join()


def _ids_file(root: Path, key: tuple) -> Path:
    """Where the ids of one collection are kept (build/exercises/ids/, beside the
    Cython builds, ignored by git): named by a digest of the collection's
    arguments and of everything collecting reads, so that any change to the
    tests, the reference code, reach.json or the built extensions makes a
    new name."""
    digest = hashlib.sha256(json.dumps([sys.executable, *key[1:]]).encode())
    digest.update(_sources_digest(root).encode())
    return root / "build" / "exercises" / "ids" / f"{digest.hexdigest()[:32]}.json"


@functools.lru_cache(maxsize=None)
def _sources_digest(root: Path) -> str:
    """SHA-256 of the tests, the package's Python sources, reach.json and pytest's
    configuration, and of the compiled extensions' names and times (whether an
    extension is built decides which tests collect); once per process."""
    digest = hashlib.sha256()
    package = root / "tinyloop"
    files = sorted({*root.glob("tests/**/*.py"), *package.rglob("*.py"), *package.rglob("*.pyx"),
                    package / "exercises" / "reach.json", root / "pyproject.toml"})
    for path in files:
        try:
            digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
        except OSError:
            pass
    for path in sorted(package.rglob("*.so")):
        digest.update(f"{path.relative_to(root)} {path.stat().st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _start_tests(root: Path, override: dict[str, str], options: list[str], arguments: list[str],
                 scratch: Path | None = None, wait: bool = False, sandboxed: bool = False,
                 collect_first: bool = False) -> _Session:
    """Start pytest with ``options`` and ``arguments``; :func:`_finish_tests` collects it.

    ``scratch``: the check's temporary directory, where its files go (default:
    the system's).  ``wait``: the run imports and collects at once, then waits before its
    first test until :meth:`_Session.start` (the reach plugin's
    ``--tinyloop-wait``, which must be among ``options``' plugins): the wide
    step is collected while the exercise's own tests run.  ``sandboxed``: the
    run starts in a sandbox (``scratch`` is the folder it sees read-only).
    ``collect_first``: the ids it must report are collected meanwhile, by
    another pytest without the student's file."""
    tmp = tempfile.TemporaryDirectory(prefix="tests-", dir=scratch)
    folder = Path(tmp.name)
    go = folder / "go" if wait else None
    seen_go = go
    if sandboxed and go is not None:
        folder.chmod(0o711)  # the sandbox's user may look for the go file, by its name
        seen_go = Path(sandbox.FOLDER) / folder.name / "go"
    expected = _Expected(root, options, arguments) if collect_first else None
    # For credit, the canary (outcomes.write_canary): a test that must fail,
    # run last, which a harness made to pass every test passes too.
    canary = outcomes.write_canary(folder) if collect_first else None
    seen_canary = []
    if canary is not None:
        folder.chmod(0o755)  # the sandbox's user reads the canary
        seen_canary = [str(Path(sandbox.FOLDER) / folder.name / outcomes.CANARY_FILE) if sandboxed
                       else canary.path]
        # A -k selection must let it through too.
        arguments = [f"({a}) or {canary.name}" if i and arguments[i - 1] == "-k" else a
                     for i, a in enumerate(arguments)]
    channel = outcomes.Channel()
    command = [sys.executable, "-c", PYTEST_MAIN, "-q", "-p", "no:cacheprovider",
               "-p", "tinyloop.exercises.outcomes", f"--maxfail={SHOW_FAILURES}",
               "-o", f"timeout={TEST_TIMEOUT:g}", *options,
               *([f"--tinyloop-wait={seen_go}"] if go else []), *arguments, *seen_canary]
    # Output goes to files, not pipes: a process the student's code forked
    # would hold a pipe open, and reading it to its end would wait for that
    # process rather than for pytest.  They are diagnostics only: the
    # verdict is read from the channel.
    with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
        if sandboxed:
            proc = sandbox.popen(command, folder=scratch, env=_sandbox_env({**override, **channel.env}),
                                 cwd=str(root), pass_fds=channel.pass_fds, stdout=out, stderr=err)
        else:
            # Its own session, so that on any exit the servers the tests started
            # go with it: a server spinning on a wrong solution must not outlive
            # the check.
            proc = subprocess.Popen(command, cwd=root, env={**os.environ, **override, **channel.env},
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    pass_fds=channel.pass_fds, start_new_session=True)
    channel.started_writer()
    return _Session(proc, tmp, go, channel, expected, sandboxed, canary)


# A test still running this long after pytest-timeout's limit is stuck where
# its signal cannot reach Python (a C loop blocked in epoll_wait, a blocked
# signal): the checker stops the run from outside (seconds).
HANG_GRACE = 15.0


def _finish_tests(session: _Session, exercise: Exercise, path: Path, root: Path,
                  own: bool = False) -> Step:
    """Wait for ``session`` (each test at most :data:`TEST_TIMEOUT` + :data:`HANG_GRACE` s,
    the run at most :data:`TESTS_TIMEOUT` s), stop what it left, and say how it went,
    from the outcomes reported on the session's channel."""
    session.start()
    proc, channel = session.proc, session.channel
    out_path, err_path = session.folder / "stdout", session.folder / "stderr"
    deadline = time.monotonic() + TESTS_TIMEOUT
    try:
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            running = channel.running
            now = time.monotonic()
            if running is not None and now - channel.started_at > TEST_TIMEOUT + HANG_GRACE:
                return Step("FAIL", f"a test was still running after {TEST_TIMEOUT + HANG_GRACE:g} s, "
                            "and the checker stopped it", [_clip(running),
                            "does your code wait, or loop, forever? (stuck where no Python "
                            "timeout reaches it: in C, or with signals blocked)"])
            if now > deadline:
                return Step("FAIL", f"the tests did not finish within {TESTS_TIMEOUT:g} s",
                            [f"running then: {_clip(running or 'no test (collecting, or between tests)')}",
                             "does your code wait for something that never happens?"])
        stop_session(proc, grace=0)  # what the tests left: the sandbox's, or the session's
        channel.finish()
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        code = proc.returncode
        if session.sandboxed and code > 128 and channel.exit is None:
            code = 128 - code  # bwrap passes a signal on as 128 + its number
        if code < 0:  # killed by a signal: a crash, wherever it happened
            return _crash(exercise, path, -code, stdout + stderr, channel.running)
        if channel.collected is None and not channel.results:  # pytest never started: the file fails on import
            return _import_failure(path, stderr)
        # Only now wait for the ids collected outside: a crash needs none.
        expected = session.expected.get() if session.expected is not None else None
    finally:
        session.stop()
    if session.expected is not None and expected is None:
        return Step("FAIL", "the checker could not collect the exercise's tests without your file",
                    ["this is a fault in the exercise, not in your file: tell your teacher",
                     _clip(session.expected.error)])
    ids = expected if expected is not None else channel.collected or []
    output = stdout + stderr
    if own and not ids and (expected is not None or code == 5):
        return Step("skip", "the exercise has no tests of its own")
    if code == 4 or not ids:  # usage error, or no test collected
        return Step("FAIL", f"the exercise's tests did not run: pytest {' '.join(exercise.tests)}",
                    ["this is a fault in the exercise, not in your file: tell your teacher",
                     properties.last_line(output)])
    results = channel.results
    canary = session.canary
    if canary is not None:  # judged apart: it must fail, and is none of the exercise's tests
        results = {i: r for i, r in results.items() if not outcomes.is_canary(i)}
    # A failure counts wherever it is reported (a collection error has no test id).
    failed = [r for r in results.values() if r.outcome == "failed"]
    finished = [i for i in ids if i in results and results[i].done]
    skipped = sum(results[i].outcome == "skipped" for i in finished)
    passed = len(finished) - skipped - sum(results[i].outcome == "failed" for i in finished)
    what = ("the exercise's own tests, stopped at the first failure" if own
            else _describe_tests(exercise, root))
    missing = [i for i in ids if i not in finished]
    if not failed and not missing and canary is not None:
        if not canary.failed_as_it_must(channel.results):
            found = canary.result(channel.results)
            seen = ("never reported" if found is None else
                    f"reported {found.outcome}" + ("" if found.outcome != "failed" else ", without its nonce"))
            return Step("FAIL", "the test harness was changed: the checker's canary test, which must "
                        "fail, did not fail as it must", [f"canary {canary.name}: {seen}",
                        "a file that makes pytest pass tests without running them earns nothing"])
        if code == 1:  # the canary's failure, and no other
            code = 0
    if not failed and not missing and code == 0:
        return Step("ok", f"tests: {passed} passed ({what})")
    if not failed:
        first = missing[0] if missing else None
        why = (f"{len(missing)} of the {len(ids)} tests never reported: the first, {first}"
               if first else f"pytest exit code {code}")
        return Step("FAIL", "the tests stopped before they all ran",
                    [_clip(why, 160), *([properties.last_line(output)] if output.strip() else [])])
    details = []
    for result in failed[:SHOW_FAILURES]:
        details += _describe(result, exercise, path)
    # pytest stops at the first failure (-x, --maxfail): the rest are not run.
    stopped = "; stopped there" if missing or "stopping after" in output else ""
    return Step("FAIL", f"tests: {len(failed)} failed, {passed} passed{stopped} ({what})", details)


def _describe_tests(exercise: Exercise, root: Path) -> str:
    """What the tests were, in a few words: the files, and the stages of the HTTP suite."""
    args = wider_test_arguments(exercise, root)
    files = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] != "-k")]
    text = ", ".join(f.removeprefix("tests/") for f in files)
    if "tests/test_servers.py" in files and _users(exercise):
        # reach.py runs each HTTP test on one stage: the exercise's own, if it has one.
        text += f"; the HTTP suite on {exercise.stage or 'one stage'}"
    return _clip(text, 160)


def _explain_crash(exercise: Exercise, path: Path, traceback: str,
                   source: str | None = None) -> list[str]:
    """The server's own traceback, shortened to the frames in the student's file:
    a test only sees the closed connection (a ConnectionResetError of its own).

    ``source``, the student's file, gives each frame's code where the traceback
    cannot: Cython's frames name the source as it was built, and Python then
    reads that line from the checkout's file, not the student's."""
    lines = re.findall(rf'File "{re.escape(str(path))}", line (\d+)', traceback)
    where = f" at line {lines[-1]} of your file" if lines else ""
    error = properties.last_line(traceback)
    if error == f"NotImplementedError: {markers.placeholder_message(exercise.name)}":
        error = "NotImplementedError: the exercise is not written yet"
    out = [f"the {exercise.stage} server, run with your file, raised an exception{where}; "
           "its traceback, your file's lines:"]
    student = source.splitlines() if source is not None else None
    text = traceback.splitlines()
    for index, line in enumerate(text):
        match = re.match(rf'\s*File "{re.escape(str(path))}", line (\d+), in (\S+)', line)
        if match:
            code = text[index + 1].strip() if index + 1 < len(text) else ""
            if student is not None:
                number = int(match.group(1))
                code = student[number - 1].strip() if 0 < number <= len(student) else ""
            out.append(f"  line {match.group(1)}, in {match.group(2)}: {_clip(code, 70)}")
    out = out[:1] + out[1:][-4:]  # the innermost frames: where it broke
    out.append(f"  {_clip(error)}")
    return out


def _describe(result: outcomes.Outcome, exercise: Exercise, path: Path) -> list[str]:
    """Two or three lines for a failed test: its name, then where and what went wrong."""
    traceback = result.text
    file, _, rest = result.id.partition("::")
    *classes, name = rest.split("::") if rest else [file]
    title = _clip(f"{name} ({'.'.join([file.removesuffix('.py').replace('/', '.'), *classes])})")
    where = ""
    # pytest writes "FILE:LINE:" for each frame, FILE relative to the directory it runs in.
    lines_in_file = re.findall(rf"(?:^|[\s/]){re.escape(path.name)}:(\d+):", traceback, re.M)
    if lines_in_file:
        where = f"line {lines_in_file[-1]} of your file: "
    if f"NotImplementedError: {markers.placeholder_message(exercise.name)}" in traceback:
        return [title, f"  {where}not written yet (it raised NotImplementedError)"]
    # pytest marks the lines that explain a failure with "E   ".
    explanation = [line[1:].strip() for line in traceback.splitlines()
                   if line.startswith("E ") and line[1:].strip()]
    if not explanation:
        explanation = [properties.last_line(traceback)]
    # A test that explains itself ("assert ok, message") puts its message
    # first, after "AssertionError: "; pytest's own restatement of the
    # expression follows, which helps less, so it goes when there is one.
    if explanation and explanation[0].startswith("AssertionError: "):
        explanation = [explanation[0][len("AssertionError: "):]]
    explanation = explanation[:2] or ["(no message)"]
    if explanation[0].startswith("Failed: Timeout"):  # pytest-timeout's words
        explanation = [f"still running after {TEST_TIMEOUT:g} s: does your code wait, "
                       "or loop, forever?"]
    explanation[0] = where + explanation[0]
    # A message says what was expected and what happened: keep all of it,
    # wrapped, rather than cut at the screen's edge.
    lines = [wrapped for line in explanation[:1] for wrapped in textwrap.wrap(line, 96)][:4]
    lines += [_clip(line) for line in explanation[1:]]
    return [title] + [f"  {line}" for line in lines]


def _import_failure(path: Path, stderr: str) -> Step:
    """The file raised while being loaded: say where in it, and what, with the
    import's own traceback reduced to the student's file."""
    lines = re.findall(rf'File "{re.escape(str(path))}", line (\d+)', stderr)
    where = f" at line {lines[-1]}" if lines else ""
    details = []
    text = stderr.splitlines()
    for index, line in enumerate(text):
        match = re.match(rf'\s*File "{re.escape(str(path))}", line (\d+), in (\S+)', line)
        if match:
            code = text[index + 1].strip() if index + 1 < len(text) else ""
            details.append(f"  line {match.group(1)}, in {match.group(2)}: {_clip(code, 70)}")
    details = ["the import's traceback, your file's lines:", *details[-4:]] if details else []
    return Step("FAIL", f"your file fails when it is imported{where}",
                details + [_clip(properties.last_line(stderr))])


# What a crash in Cython usually is, said where a student will read it.
_CYTHON_CRASH_HINT = [
    "in Cython a crash is most often a reference count or a lifetime: an object",
    "freed while libuv still holds a pointer into it (keep the request and its bytes",
    "alive, with a Py_INCREF, until libuv's callback), or a Py_DECREF too many",
]


def _crash(exercise: Exercise, path: Path, number: int, output: str, running: str | None = None) -> Step:
    """The test process died by signal ``number``: name the signal and the test, and
    show faulthandler's frames that are in the student's file (and the test's line)."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    # faulthandler (on in pytest) prints the crashing thread's stack, innermost first:
    #   File "/path/tests/test_x.py", line 12 in test_something
    frames = re.findall(r'^\s*File "([^"]+)", line (\d+) in (\S+)', output, re.M)
    tests = [(f, n, fn) for f, n, fn in frames if fn.startswith("test_")]
    test = tests[0][2] if tests else running.rpartition("::")[2] if running else "a test"
    details = []
    mine = [(n, fn) for f, n, fn in frames if Path(f).name == path.name]
    if mine:
        details.append("where it was, your file's lines (innermost first):")
        details += [f"  line {n}, in {fn}" for n, fn in mine[:4]]
    elif tests:
        f, n, fn = tests[0]
        details.append(f"it happened during {fn} ({Path(f).name}, line {n}), "
                       "inside compiled code that has no Python frame")
    else:
        details.append("no Python frame was printed: it happened inside compiled code")
    if exercise.extension is not None:
        details += _CYTHON_CRASH_HINT
    return Step("FAIL", f"CRASHED ({name}) in {test} — your file crashed the interpreter",
                details, crashed=True)


def _clip(line: str, width: int = 100) -> str:
    return line if len(line) <= width else line[:width - 3] + "..."
