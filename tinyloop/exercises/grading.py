"""The checker's verdicts in the forms teachers' tools read, and the
commands around them:

  check NAME [FILE] --format json|junit   one report, as JSON or JUnit XML
  grade DIR [--out OUT] [--jobs N] [--exercises A,B] [--student NAME]
                                          every student's files in DIR, in
                                          parallel: grades.csv and, per
                                          student, Gradescope's results.json
                                          and a JUnit file
  progress [DIR]                          which exercises pass, by chapter

(classroom DIR, a GitHub Classroom repository, is tinyloop/exercises/classroom.py.)

Rules this module keeps:
  * A student's check runs in a subprocess of its own with a time limit
    (:func:`_check_one`): a crash or a hang costs that row only.  Checks
    run side by side in threads, each waiting on its own subprocess; every
    output is written in one order (student, then exercise), whatever
    order the checks finish in, so ``--jobs 1`` and ``--jobs 8`` write the
    same CSV.
  * Every assigned exercise is a row for every student: a missing, empty,
    binary or misnamed file scores 0 with the reason, and is not run.
  * A test's name is a stable id, ``tinyloop.EXERCISE::STEP`` (no counts,
    no timings), so a teacher's tools see the same tests on every run.
  * Nothing is written into the checkout or into the teacher's own
    progress: grade writes into OUT (default DIR/grades); ``check`` keeps a
    student's last verdicts in the user's cache folder (~/.cache/tinyloop),
    keyed by the file's path and contents, under a lock.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import hashlib
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tinyloop
from tinyloop.exercises import catalog, checker, markers
from tinyloop.exercises.checker import Report, stop_session

__all__ = ["GRADE_TIMEOUT", "default_jobs", "grade", "junit_suite", "main", "progress", "record",
           "report_json", "report_junit", "sandbox_missing", "step_ids"]

GRADE_TIMEOUT = 600.0  # seconds for one student's check of one exercise


# --- one report: stable test ids, JSON, JUnit ---------------------------------------------

# The checker's steps, by the first words of their text (checker.py): the
# steps before the tests and after them.  A step with an "id" of its own
# keeps it.
_STEP_WORDS = (
    ("compiles", ("the file compiles", "your file does not compile", "your file is not UTF-8")),
    ("written", ("the exercise is written", "not written yet")),
    ("defines", ("it defines what", "your file does not define")),
    ("builds", (" builds with your file", " does not build with your file")),
    ("guard", ("your code tried to",)),
    ("loop-properties", ("loop properties: measured once",)),
)
_PROPERTY = re.compile(r"^([a-z][a-z0-9_]*): ")


def step_ids(exercise: str, steps: list[dict]) -> list[str]:
    """The stable test id of each of a report's ``steps`` (:func:`report_json`'s
    dicts), ``tinyloop.EXERCISE::STEP``: ``compiles``, ``written``, ``defines``,
    ``builds`` (Cython), ``own-tests`` (the exercise's own tests), ``tests`` (the
    wider suites), ``guard``, a loop property by its name (``single-thread``), or
    ``loop-properties`` when they were not measured.  A step that already has an
    ``"id"`` keeps it; the same step of two checks has the same id, whatever the
    counts and timings in its text.
    """
    ids: list[str] = []
    tests_seen = 0
    try:
        own = bool(checker.own_test_arguments(catalog.get(exercise)))
    except (KeyError, OSError, checker.CheckerError):  # no such exercise, no checkout: all are "tests"
        own = False
    for step in steps:
        found = step.get("id")
        if found is None:
            text = step["text"]
            found = next((name for name, starts in _STEP_WORDS
                          if any(text.startswith(s) or (s[0] == " " and s in text) for s in starts)), None)
        if found is None:
            match = _PROPERTY.match(step["text"])
            if match and not step["text"].startswith("tests: "):
                found = match.group(1).replace("_", "-")
        if found is None:  # a test run: its counts, a time-out, a crash, an import failure
            found = "own-tests" if own and tests_seen == 0 else "tests"
            tests_seen += 1
        found = found if found.startswith("tinyloop.") else f"tinyloop.{exercise}::{found}"
        while found in ids:  # never two tests of one name
            found += "+"
        ids.append(found)
    return ids


def report_json(report: Report) -> dict:
    """``report`` as a JSON-ready dict: the exercise, the file, the verdict, every
    step with its stable ``id`` (:func:`step_ids`) and its whole text."""
    steps = [{"status": s.status, "text": s.text, "details": s.details, "crashed": s.crashed,
              **({"id": s.id} if getattr(s, "id", None) else {})} for s in report.steps]
    for step, test_id in zip(steps, step_ids(report.exercise.name, steps)):
        step["id"] = test_id
    return {"exercise": report.exercise.name, "chapter": report.exercise.chapter,
            "file": str(report.path), "passed": report.passed, "steps": steps}


def junit_suite(exercise: str, data: dict | None, seconds: float | None = None,
                status: str = "", message: str = "", name: str | None = None) -> ET.Element:
    """One exercise's check as a JUnit ``<testsuite>``: a test case per step, named by
    its stable id; a FAIL step is a ``<failure>`` (its first line the ``message``,
    the details the text), a crash or a check that could not finish an ``<error>``,
    a skip ``<skipped>``.  ``data`` is :func:`report_json`'s dict, or None for a
    check that gave none (``status``: ``timeout``, ``error``, ``missing``,
    ``misnamed``..., said by ``message``).  ``seconds``: the check's wall time, the
    suite's ``time``.  The shape is JUnit's as Jenkins and pytest write it
    (``tests``, ``failures``, ``errors``, ``skipped``, ``time`` on the suite)."""
    suite = ET.Element("testsuite", name=name or f"tinyloop.{exercise}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(test_id: str, kind: str | None, text: str = "", details: str = "") -> None:
        counts["tests"] += 1
        element = ET.SubElement(suite, "testcase", classname=f"tinyloop.{exercise}", name=test_id)
        if kind is not None:
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1
            ET.SubElement(element, kind, message=text).text = details or None

    if data is None:
        # No report: the check timed out or broke (an error), or the file was
        # never run (a failure of the submission, with its reason).
        step = "check" if status in ("timeout", "error") else "file"
        case(f"tinyloop.{exercise}::{step}", "error" if step == "check" else "failure", message)
    else:
        for step in data["steps"]:
            test_id = step.get("id") or f"tinyloop.{exercise}::step"
            details = "\n".join(step["details"])
            if step["status"] == "FAIL":
                kind = "error" if step.get("crashed") else "failure"
                case(test_id, kind, _reason(step), f"{step['text']}\n{details}".strip())
            elif step["status"] == "skip":
                case(test_id, "skipped", step["text"])
            else:
                case(test_id, None)
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{seconds or 0.0:.3f}")
    return suite


def report_junit(report: Report, seconds: float | None = None) -> str:
    """``report`` as JUnit XML, one ``<testsuite>`` (:func:`junit_suite`); ``seconds``
    the check's wall time."""
    return ET.tostring(junit_suite(report.exercise.name, report_json(report), seconds), encoding="unicode")


# A failed test as the checker names it first in a step's details:
# "test_name[param] (tests.test_module)".
_TEST_TITLE = re.compile(r"^(test\S*) \(")


def _is_test_run(step: dict) -> bool:
    return step.get("id", "").split("::")[-1].rstrip("+") in ("own-tests", "tests")


def _reason(step: dict) -> str:
    """Why a FAIL ``step`` failed, in one line: a failed test's explanation (the
    indented lines after its name), else the step's text, and for a test run
    its first detail (the test that never reported, or was stopped)."""
    details = step["details"]
    if details and _TEST_TITLE.match(details[0]):
        explanation = []
        for line in details[1:]:
            if not line.startswith("  "):
                break  # the next failed test
            explanation.append(line.strip())
        if explanation:
            return " ".join(explanation)
    if _is_test_run(step) and details and details[0].strip():
        return f"{step['text']}: {details[0].strip()}"
    return step["text"]


def _first_failure(data: dict) -> tuple[str, str]:
    """(the first failing test's id, its reason) in a report dict: for a test
    run, the id of its step and then the pytest test that failed first."""
    for step in data["steps"]:
        if step["status"] == "FAIL":
            test_id = step.get("id", "")
            match = _TEST_TITLE.match(step["details"][0]) if step["details"] else None
            if match and _is_test_run(step):
                test_id += f"::{match.group(1)}"
            return test_id, _reason(step)
    return "", ""


# --- progress: the last verdict of each file ------------------------------------------------

def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tinyloop" / "progress.json"


def _key(path: Path) -> str:
    return f"{path.resolve()}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s lock file (``PATH.lock``, flock(2)) for the
    block: students run several checks at once (``watch`` in one terminal, ``check``
    in another), and two read-modify-write cycles must not lose a verdict."""
    import fcntl  # POSIX only, as tinyloop is
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and rename(2): a reader
    sees the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def record(report: Report) -> None:
    """Remember ``report``'s verdict for ``progress`` (best effort: a cache, not a
    record).  Safe to call from checks running at the same time (:func:`_locked`)."""
    cache = _cache()
    try:
        with _locked(cache):
            try:
                data = json.loads(cache.read_text())
            except FileNotFoundError:
                data = {}
            except ValueError:
                data = {}  # a damaged cache is rebuilt, not a reason to fail a check
            data[_key(report.path)] = {"passed": report.passed, "time": time.time()}
            _write_atomically(cache, json.dumps(data))
    except OSError:
        pass


def progress(directory: str | os.PathLike[str] = ".") -> int:
    """Print, by chapter, each exercise's state for the files in ``directory``:
    not started (no file), not written (a placeholder is left), passed or
    failed at its last check, or not checked since it changed.  Returns 0."""
    folder = Path(directory)
    try:
        seen = json.loads(_cache().read_text())
    except (OSError, ValueError):
        seen = {}
    width = max(len(e.name) for e in catalog.exercises())
    done = total = 0
    for chapter in catalog.chapters():
        print(f"{chapter}:")
        for exercise in catalog.by_chapter(chapter):
            total += 1
            path = folder / markers.default_file(exercise)
            if not path.is_file():
                state = "not started"
            else:
                try:
                    text = path.read_text()
                except (OSError, UnicodeDecodeError):
                    text = None
                if text is not None and markers.unwritten_lines(text, exercise.name):
                    state = "started, not written yet"
                else:
                    last = seen.get(_key(path))
                    state = ("not checked since it changed" if last is None
                             else "PASSED" if last["passed"] else "FAILED at its last check")
                    done += last is not None and last["passed"]
            print(f"  {exercise.name:<{width}}  {state}")
    print(f"\n{done} of {total} exercises pass "
          f"(`{markers.python_command()} -m tinyloop check NAME` grades one)")
    return 0


# --- grade: a class's files ---------------------------------------------------------------

# Folders that never hold a student's work: grade's own output, a clone's,
# an editor's, and Gradescope's results/ and source/ beside a submission.
_NOT_STUDENTS = frozenset({"grades", "results", "source", ".git", "__pycache__", ".venv", "venv",
                           "node_modules"})
CACHE_FILE = "cache.jsonl"  # in OUT: the verdicts a re-run reuses, a line each


def default_jobs() -> int:
    """How many checks ``grade`` runs at once by default: the cores this process may
    use (sched_getaffinity(2), so a ``taskset`` or a container's CPU set counts)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS has no sched_getaffinity
        return max(1, os.cpu_count() or 1)


@dataclass
class _Submission:
    """One student's files: ``files`` the exactly named ones, by exercise; ``others``
    every other file, as ``(name shown, path)``, where a misnamed one is found;
    ``prefix`` what goes before a file's name (``STUDENT__`` in a flat folder)."""

    files: dict[str, Path] = field(default_factory=dict)
    others: list[tuple[str, Path]] = field(default_factory=list)
    prefix: str = ""


def _normal(filename: str) -> str:
    """The exercise a file name means, spelled as exercises are: ``Run_Once.py``,
    ``run once.txt``, ``run-once (1).py`` all mean ``run-once``."""
    stem = filename.lower().split(".", 1)[0]
    stem = re.sub(r"\s*\(\d+\)$", "", stem.strip())
    return re.sub(r"[\s_]+", "-", stem).strip("-")


def _walk(folder: Path, skip: Path | None) -> list[Path]:
    """Every file under ``folder``, in sorted order, less :data:`_NOT_STUDENTS`
    folders and ``skip`` (grade's output)."""
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _NOT_STUDENTS
                         and (skip is None or Path(top, d).resolve() != skip))
        found += [Path(top, f) for f in sorted(files)]
    return found


def _add(submission: _Submission, shown: str, path: Path, expected: dict[str, str]) -> None:
    name = next((n for n, filename in expected.items() if filename == shown), None)
    if name is not None:
        submission.files.setdefault(name, path)
    else:
        submission.others.append((submission.prefix + shown, path))


def _submissions(folder: Path, student: str | None, skip: Path | None) -> dict[str, _Submission]:
    """{student: their files}.  With ``student``, ``folder`` is that one student's
    submission (files anywhere in it, as Gradescope's /autograder/submission).
    Otherwise each folder in ``folder`` is a student's (a folder or a clone, the
    files anywhere in it), and ``STUDENT__FILE`` files at the top are a flat
    collection."""
    expected = {e.name: markers.default_file(e) for e in catalog.exercises()}
    if student is not None:
        submission = _Submission()
        for path in _walk(folder, skip):
            _add(submission, path.name, path, expected)
        return {student: submission}
    found: dict[str, _Submission] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name in _NOT_STUDENTS or entry.name.startswith(".") or \
                (skip is not None and entry.resolve() == skip):
            continue
        if entry.is_dir():
            submission = found.setdefault(entry.name, _Submission())
            for path in _walk(entry, skip):
                _add(submission, path.name, path, expected)
        elif entry.is_file() and "__" in entry.name:
            name, _, shown = entry.name.rpartition("__")
            submission = found.setdefault(name, _Submission(prefix=f"{name}__"))
            _add(submission, shown, entry, expected)
    return found


def _loose_files(folder: Path) -> list[str]:
    """Files at the top of ``folder`` that look like exercise files (``run-once.py``,
    ``run_once.py``): ``folder`` is then one student's submission."""
    names = {e.name for e in catalog.exercises()}
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and "__" not in p.name and _normal(p.name) in names)


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be graded ("empty", "binary"), or None."""
    data = path.read_bytes()
    if not data.strip():
        return "empty"
    if b"\0" in data:
        return "binary"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    return None


def _check_one(name: str, path: Path, timeout: float, *,
               sandboxed: bool = True) -> tuple[str, dict | None, str, float]:
    """Run one check in a subprocess: (status, report JSON or None, message, seconds).

    ``status``: "passed", "failed", "timeout" (the whole check took more than
    ``timeout`` seconds), or "error" (the check could not run; ``message``
    says why).  ``sandboxed`` (the default): every process that runs the file
    runs in a sandbox (tinyloop/exercises/sandbox.py; callers first ask
    ``sandbox.available()``), and the verdict is taken outside it; False: the
    student's own check, with the audit-hook guard, but with the test ids
    collected without the file all the same (``--for-credit``).  The check is
    ``python -m tinyloop.exercises.grading``, which records nothing in the
    teacher's progress file; its HOME and cache folder are a fresh
    temporary folder all the same, and a sandbox's are its private tmp."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tinyloop-grade-") as tmp:
        env = {**os.environ, "HOME": tmp, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        # --no-overlap: grade's parallelism is across checks (--jobs), so each
        # check's steps run one after another, on one core.
        proc = subprocess.Popen([sys.executable, "-m", "tinyloop.exercises.grading", name, str(path),
                                 "--sandboxed" if sandboxed else "--for-credit", "--no-overlap"],
                                cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = "", ""
            status = "timeout"
        else:
            status = ""
        finally:
            stop_session(proc)  # and whatever the check left behind, its tests and sandboxes included
            proc.communicate()
    seconds = round(time.monotonic() - started, 1)
    if status == "timeout":
        return "timeout", None, f"the check did not finish within {timeout:g} s", seconds
    try:
        data = json.loads(out)
    except ValueError:
        last = (err.strip().splitlines() or ["no output"])[-1]
        return "error", None, f"the check itself failed (exit {proc.returncode}): {last}", seconds
    failed = [s for s in data["steps"] if s["status"] == "FAIL"]
    return ("passed" if data["passed"] else "failed"), data, failed[0]["text"] if failed else "", seconds


def sandbox_missing() -> str | None:
    """Why grade's checks cannot run in the sandbox here (tinyloop/exercises/sandbox.py:
    no bwrap, no user namespaces, not Linux), in one line, or None when they can."""
    try:
        from tinyloop.exercises import sandbox
    except ImportError:
        return "this tinyloop has no sandbox (tinyloop/exercises/sandbox.py)"
    return sandbox.available()


def _run_check(name: str, path: Path, timeout: float, sandboxed: bool) -> tuple[str, dict | None, str, float]:
    """:func:`_check_one`, sandboxed or not, on ``path`` made absolute (the check runs
    in a folder of its own)."""
    return _check_one(name, path.resolve(), timeout, sandboxed=sandboxed)


def _cache_key(name: str, path: Path, timeout: float, sandboxed: bool) -> str:
    """What a verdict depends on: the file's bytes, the exercise, tinyloop's version
    (its tests), the sandbox and the time limit."""
    digest = hashlib.sha256(json.dumps([tinyloop.__version__, name, sandboxed, timeout]).encode())
    digest.update(b"\0" + path.read_bytes())
    return digest.hexdigest()


def _load_cache(path: Path) -> dict[str, list]:
    """{key: verdict} from ``path``, one JSON object a line (``{"key": ..., "verdict":
    [status, report, message, seconds]}``), appended as checks finish: an
    interrupted run loses at most the line it was writing, which is skipped."""
    cache: dict[str, list] = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                    cache[entry["key"]] = entry["verdict"]
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return cache


class _Display:
    """The progress of a grading run: the count, the failures so far and an ETA.

    On a terminal, rich's progress bar (rich is in the dev extra; tinyloop itself
    imports only the standard library, so without rich it is plain lines), with
    each finished check printed above it; otherwise one plain line per check,
    ``[DONE/TOTAL] ... failures so far F, about S s left``, which a log keeps."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.failed = total, 0, 0
        self.started = time.monotonic()
        self._rich = None
        self._task = None
        if total and sys.stdout.isatty():
            try:  # by name: tinyloop itself imports only the standard library (tests/test_project.py)
                rich_progress = importlib.import_module("rich.progress")
            except ImportError:
                pass
            else:
                self._rich = rich_progress.Progress(
                    rich_progress.TextColumn("grading"), rich_progress.BarColumn(),
                    rich_progress.MofNCompleteColumn(),
                    rich_progress.TextColumn("{task.fields[failed]} failed"),
                    rich_progress.TimeElapsedColumn(), rich_progress.TextColumn("ETA"),
                    rich_progress.TimeRemainingColumn())

    def __enter__(self) -> _Display:
        if self._rich is not None:
            self._rich.start()
            self._task = self._rich.add_task("grading", total=self.total, failed=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.stop()

    def show(self, line: str) -> None:
        """A line that is not a check (a file not run, a verdict from the cache)."""
        if self._rich is not None:
            self._rich.console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    def finished(self, line: str, failed: bool) -> None:
        """One check is done: ``line`` says how."""
        self.done += 1
        self.failed += failed
        if self._rich is not None:
            self._rich.console.print(line, markup=False, highlight=False)
            self._rich.update(self._task, advance=1, failed=self.failed)
            return
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        print(f"[{self.done}/{self.total}] {line}  (failures so far {self.failed}, "
              f"about {left:.0f} s left)", flush=True)


def _text(status: str, data: dict | None, reason: str) -> str:
    """The output a student sees for one exercise (Gradescope's test ``output``)."""
    head = "PASSED" if status == "passed" else f"{status.upper()}: {reason}" if reason else status.upper()
    if not data:
        return head
    lines = [head, ""]
    for step in data["steps"]:
        lines.append(f"{step['status']:<5} {step['text']}")
        lines += [f"        {d}" for d in step["details"]]
    return "\n".join(lines)


def grade(directory: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
          timeout: float = GRADE_TIMEOUT, *, jobs: int | None = None, exercises: list[str] | None = None,
          student: str | None = None, force: bool = False, unsandboxed: bool = False) -> int:
    """Grade a class's files (or one student's) in ``directory``, ``jobs`` checks at
    a time; write ``OUT/grades.csv``, and per student ``OUT/STUDENT/results.json``
    (Gradescope's format) and ``OUT/STUDENT/junit.xml``.

    ``directory`` holds a folder (or a clone) per student, ``DIR/STUDENT/...``,
    the files anywhere in it, or the files flat, ``DIR/STUDENT__NAME.py``; with
    ``student``, it is that one student's submission, the files anywhere in it.
    A file is the exercise's when named exactly as ``start`` writes it
    (``run-once.py``; ``uv-timer-heap.pyx``); a near miss (``run_once.py``,
    ``Run-Once.py``, ``run-once.txt``) scores 0 as ``misnamed``, its reason
    saying ``found run_once.py: expected run-once.py``.

    ``exercises``: the assigned set, in the order wanted; every student gets a
    row for each (``missing`` when not handed in), and each counts in
    ``max_score``.  Without it, the set is every exercise someone handed in
    (or misnamed).  ``timeout``: seconds one check may take.  ``jobs``:
    checks run at once (default :func:`default_jobs`), each in a subprocess
    of its own (and a sandbox of its own).  A check whose file, exercise,
    tinyloop version, sandbox and time limit are those of a verdict in
    ``OUT/cache.jsonl`` is not run again, unless ``force``.  Without
    ``unsandboxed``, grade refuses to run when the sandbox cannot be built
    here (:func:`sandbox_missing`), and says why.

    **The interface a Gradescope ``run_autograder`` uses** (Gradescope puts the
    submission in ``/autograder/submission`` and reads
    ``/autograder/results/results.json``)::

        python -m tinyloop grade /autograder/submission --student NAME \\
            --exercises A,B,... --out DIR
        cp DIR/NAME/results.json /autograder/results/results.json

    ``DIR/NAME/results.json`` is Gradescope's documented format
    (https://gradescope-autograders.readthedocs.io/en/latest/specs/, "Output
    format"): ``score``, ``execution_time`` (seconds), ``output``,
    ``stdout_visibility``, and ``tests``, one per assigned exercise, each with
    ``name`` (the exercise), ``score``, ``max_score`` (1), ``status``
    (``passed`` or ``failed``), ``output`` (the checker's report, or the
    reason it did not run) and ``visibility``.  It is written for every
    student, whatever they handed in; the exit code is 0 then.

    ``grades.csv``: one row per student and exercise, ``student, exercise,
    status, score, max_score, failed_test, reason, file``: ``status`` is
    ``passed``, ``failed``, ``timeout``, ``error`` (the check itself broke),
    ``missing``, ``misnamed``, ``empty`` or ``binary``; ``failed_test`` the
    first failing test's id (``tinyloop.EXERCISE::STEP``, and the pytest test
    that failed in it); ``reason`` why, in one line.  No timings, so two runs
    of one class give the same file.

    Returns 0; 2 for a usage error (no student's file, an unknown exercise,
    one student's files given without ``student``, no sandbox without
    ``unsandboxed``), said in one line on standard error; 130 if interrupted.
    """
    folder = Path(directory)
    target = Path(out) if out is not None else folder / "grades"
    if not folder.is_dir():
        return _usage(f"{folder} is not a folder")
    known = [e.name for e in catalog.exercises()]
    if exercises is not None:
        unknown = [n for n in exercises if n not in known]
        if unknown or not exercises:
            return _usage(f"no exercise {', '.join(unknown) or '(an empty list)'}: "
                          f"the exercises are {', '.join(known)}")
    if student is None and _loose_files(folder):
        return _usage(f"{folder} holds exercise files at its top ({', '.join(_loose_files(folder)[:3])}): "
                      "it is one student's submission; say whose with --student NAME")
    students = _submissions(folder, student, target.resolve())
    if exercises is None:
        found = {n for s in students.values() for n in s.files}
        found |= {_normal(shown.rpartition("__")[2]) for s in students.values() for shown, _ in s.others}
        exercises = [n for n in known if n in found]
        if exercises:
            print(f"tinyloop: no --exercises given: grading the {len(exercises)} exercises someone "
                  "handed in; give the assigned set so that each counts in max_score", file=sys.stderr)
    if not exercises or not students:
        return _usage(f"no student's exercise file in {folder} (expected STUDENT/NAME.py or "
                      "STUDENT__NAME.py, NAME an exercise of `python -m tinyloop exercises`; "
                      "or one student's files, with --student NAME)")
    reason = sandbox_missing()
    if reason is not None and not unsandboxed:
        return _usage(f"cannot grade for credit without the sandbox: {reason}. Give --unsandboxed to "
                      "grade anyway, each check then running with your rights")
    sandboxed = reason is None and not unsandboxed
    if not sandboxed:
        print("tinyloop: grading without the sandbox: each check runs with your rights", file=sys.stderr)
    jobs = jobs if jobs is not None else default_jobs()
    target.mkdir(parents=True, exist_ok=True)
    cache_path = target / CACHE_FILE
    cache = {} if force else _load_cache(cache_path)
    if force:
        cache_path.unlink(missing_ok=True)

    # Every (student, exercise): a verdict now (a file not run, or the cache's), or a check to run.
    verdicts: dict[tuple[str, str], tuple[str, dict | None, str, float]] = {}
    paths: dict[tuple[str, str], Path | None] = {}
    to_run: list[tuple[str, str, Path, str]] = []
    shown_lines = []
    for name_of_student, submission in sorted(students.items()):
        for name in exercises:
            expected = submission.prefix + markers.default_file(catalog.get(name))
            path = submission.files.get(name)
            paths[name_of_student, name] = path
            if path is None:
                near = [shown for shown, _ in submission.others if _normal(shown.rpartition("__")[2]) == name]
                paths[name_of_student, name] = next((p for s, p in submission.others if s in near[:1]), None)
                verdicts[name_of_student, name] = (
                    ("misnamed", None, f"found {near[0]}: expected {expected}", 0.0) if near
                    else ("missing", None, f"no file {expected} in the submission", 0.0))
                continue
            why = _unreadable(path)
            if why:
                verdicts[name_of_student, name] = (why, None, f"{why} file {path.name}: not run", 0.0)
                continue
            key = _cache_key(name, path, timeout, sandboxed)
            if key in cache:
                verdicts[name_of_student, name] = tuple(cache[key])  # type: ignore[assignment]
                shown_lines.append(f"{name_of_student:<20} {name:<24} {cache[key][0]:<8} "
                                   "(graded before: the same file, not run again)")
            else:
                to_run.append((name_of_student, name, path, key))

    started = time.monotonic()
    # SIGTERM (a CI's time-out, kill(1)) stops the checks as Ctrl-C does.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    with _Display(len(to_run)) as display, open(cache_path, "a") as cache_file:
        for line in shown_lines:
            display.show(line)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs),
                                                     thread_name_prefix="tinyloop-grade")
        try:
            futures = {pool.submit(_run_check, name, path, timeout, sandboxed): (who, name, key)
                       for who, name, path, key in to_run}
            for future in concurrent.futures.as_completed(futures):
                who, name, key = futures[future]
                status, data, message, seconds = future.result()
                verdicts[who, name] = (status, data, message, seconds)
                if status in ("passed", "failed"):  # a timeout or a broken check is tried again
                    cache_file.write(json.dumps({"key": key, "verdict": [status, data, message, seconds]}) + "\n")
                    cache_file.flush()
                display.finished(f"{who:<20} {name:<24} {status:<8} {seconds:6.1f} s  {message}",
                                 status != "passed")
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            _stop_running_checks()
            print(f"\ntinyloop: interrupted; the finished checks are kept in {cache_path}: "
                  "run grade again to go on", file=sys.stderr)
            return 130
        finally:
            pool.shutdown(wait=True)
            if main and previous is not None:
                signal.signal(signal.SIGTERM, previous)
    _write_grades(target, folder, students, exercises, verdicts, paths, sandboxed)
    ran = len(to_run)
    print(f"graded {len(verdicts)} (student, exercise) pairs: {ran} checks run in "
          f"{time.monotonic() - started:.0f} s with --jobs {jobs}, "
          f"{sum(1 for v in verdicts.values() if v[0] == 'passed')} passed; "
          f"wrote {target / 'grades.csv'} and {len(students)} results.json in {target}")
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_running_checks() -> None:
    """Send SIGTERM to every check still running: each is a child of this process
    and leads a session of its own (:func:`_check_one`), and turns SIGTERM into an
    exit that stops what it started.  Read from /proc (Linux); elsewhere the
    running checks end at their time limit."""
    me = os.getpid()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            # /proc/PID/stat, after the command's closing parenthesis: state, ppid, pgrp...
            state, ppid, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(ppid) == me and int(pgrp) == int(entry.name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pgrp), signal.SIGTERM)


def _usage(message: str) -> int:
    print(f"tinyloop: {message}", file=sys.stderr)
    return 2


def _write_grades(target: Path, folder: Path, students: dict[str, _Submission], exercises: list[str],
                  verdicts: dict[tuple[str, str], tuple[str, dict | None, str, float]],
                  paths: dict[tuple[str, str], Path | None], sandboxed: bool) -> None:
    """grades.csv, and each student's results.json and junit.xml, in one order."""
    rows = []
    for who in sorted(students):
        tests, suites, total = [], [], 0.0
        for name in exercises:
            status, data, message, seconds = verdicts[who, name]
            total += seconds
            if status == "passed":
                failed_test, reason = "", ""
            elif data is not None:
                failed_test, reason = _first_failure(data)
            else:  # no report: the check timed out or broke, or the file was not run
                failed_test = f"tinyloop.{name}::{'check' if status in ('timeout', 'error') else 'file'}"
                reason = message
            path = paths[who, name]
            score = 1.0 if status == "passed" else 0.0
            rows.append({"student": who, "exercise": name, "status": status, "score": score,
                         "max_score": 1.0, "failed_test": failed_test, "reason": reason,
                         "file": _shown_path(path, folder)})
            tests.append({"name": name, "score": score, "max_score": 1.0,
                          "status": "passed" if status == "passed" else "failed",
                          "output": _text(status, data, reason), "visibility": "visible"})
            suites.append(junit_suite(name, data, seconds, status, message, name=f"{who}.tinyloop.{name}"))
        passed = sum(t["score"] for t in tests)
        result = {"score": passed, "execution_time": round(total),
                  "output": f"tinyloop {tinyloop.__version__}: {passed:g} of {len(tests)} exercises pass"
                            f"{'' if sandboxed else ' (graded without the sandbox)'}",
                  "stdout_visibility": "hidden", "tests": tests}
        (target / who).mkdir(parents=True, exist_ok=True)
        _write_atomically(target / who / "results.json", json.dumps(result, indent=1) + "\n")
        top = ET.Element("testsuites", name=who)
        for key in ("tests", "failures", "errors", "skipped"):
            top.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
        top.set("time", f"{sum(float(s.get('time', '0')) for s in suites):.3f}")
        top.extend(suites)
        ET.indent(top)
        _write_atomically(target / who / "junit.xml",
                          '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(top, encoding="unicode") + "\n")
    with open(target / "grades.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _shown_path(path: Path | None, folder: Path) -> str:
    if path is None:
        return ""
    try:
        return str(path.resolve().relative_to(folder.resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """``python -m tinyloop.exercises.grading NAME FILE [--sandboxed] [--for-credit] [--verdict-only] [--quick] [--no-overlap]``:
    check FILE and print the report as JSON (:func:`report_json`) on standard
    output; exit 0 passed, 1 failed, 2 the check could not run (one line on
    standard error).

    The graders' entry point (grade, the mutation runner): unlike ``python -m
    tinyloop check``, it records nothing in the user's progress file."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m tinyloop.exercises.grading",
                                     description="check one file; print the report as JSON")
    parser.add_argument("exercise")
    parser.add_argument("file")
    parser.add_argument("--sandboxed", action="store_true", help="run the file's processes in a sandbox")
    parser.add_argument("--for-credit", action="store_true",
                        help="take the test ids from a collection without the file (implied by --sandboxed)")
    parser.add_argument("--verdict-only", action="store_true",
                        help="skip the diagnosis of a failure: the same verdict, sooner")
    parser.add_argument("--quick", action="store_true", help="the loop properties with smaller counts")
    parser.add_argument("--no-overlap", action="store_true",
                        help="run the check's steps one after another, on one core (grade runs --jobs "
                             "checks at once); the same verdict")
    args = parser.parse_args(argv)
    # SIGTERM (a grader's time-out) becomes an exit, so the finally blocks
    # stop the test sessions and sandboxes this check started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        report = checker.check(catalog.get(args.exercise), args.file, quick=args.quick,
                       verdict_only=args.verdict_only, sandboxed=args.sandboxed,
                       collect_first=args.sandboxed or args.for_credit, overlap=not args.no_overlap)
    except (KeyError, checker.CheckerError) as error:
        print(f"tinyloop: {error.args[0]}", file=sys.stderr)
        return 2
    print(json.dumps(report_json(report), indent=1))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
