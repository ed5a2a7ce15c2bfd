"""The checker's verdicts in the forms teachers' tools read, and the
commands around them:

  check NAME [FILE] --format json|junit   one report, as JSON or JUnit XML
  grade DIR [--out OUT]                   every student's files in DIR:
                                          grades.csv and, per student, a
                                          Gradescope-style results.json
  progress [DIR]                          which exercises pass, by chapter

(classroom DIR, a GitHub Classroom repository, is tinyloop/exercises/classroom.py.)

Rules this module keeps:
  * A student's check runs in its own subprocess with a time limit, in
    its own session: a crash or a hang costs that row only, and nothing
    it started outlives the limit.
  * A missing, empty or binary file is marked in its row and skipped.
  * Nothing is written into the checkout: grade writes into OUT (default
    DIR/grades), progress keeps the last verdicts in the user's cache
    folder (~/.cache/tinyloop), keyed by the file's path and contents.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tinyloop.exercises import catalog, markers
from tinyloop.exercises.checker import Report, stop_session

__all__ = ["GRADE_TIMEOUT", "grade", "progress", "record", "report_json", "report_junit"]

GRADE_TIMEOUT = 600.0  # seconds for one student's check of one exercise


def report_json(report: Report) -> dict:
    """``report`` as a JSON-ready dict: the exercise, the file, the verdict, every step."""
    return {"exercise": report.exercise.name, "chapter": report.exercise.chapter,
            "file": str(report.path), "passed": report.passed,
            "steps": [{"status": s.status, "text": s.text, "details": s.details, "crashed": s.crashed}
                      for s in report.steps]}


def report_junit(report: Report) -> str:
    """``report`` as JUnit XML: one test case per step (a FAIL is a failure, a skip skipped)."""
    failures = sum(s.status == "FAIL" for s in report.steps)
    suite = ET.Element("testsuite", name=f"tinyloop.{report.exercise.name}",
                       tests=str(len(report.steps)), failures=str(failures),
                       skipped=str(sum(s.status == "skip" for s in report.steps)))
    for index, step in enumerate(report.steps, 1):
        case = ET.SubElement(suite, "testcase", classname=f"tinyloop.{report.exercise.name}",
                             name=f"{index:02d} {step.text}")
        if step.status == "FAIL":
            ET.SubElement(case, "failure", message=step.text).text = "\n".join(step.details)
        elif step.status == "skip":
            ET.SubElement(case, "skipped", message=step.text)
    return ET.tostring(suite, encoding="unicode")


# --- progress: the last verdict of each file ------------------------------------------------

def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tinyloop" / "progress.json"


def _key(path: Path) -> str:
    return f"{path.resolve()}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def record(report: Report) -> None:
    """Remember ``report``'s verdict for ``progress`` (best effort: a cache, not a record)."""
    cache = _cache()
    try:
        data = json.loads(cache.read_text()) if cache.exists() else {}
        data[_key(report.path)] = {"passed": report.passed, "time": time.time()}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(data))
    except (OSError, ValueError):
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


# --- grade: a folder of students' files -----------------------------------------------------

def _student_files(folder: Path) -> dict[str, dict[str, Path]]:
    """{student: {exercise: file}}: DIR/STUDENT/NAME.py (a folder or a clone per student;
    the file may be anywhere in it), or DIR/STUDENT__NAME.py (files collected flat)."""
    names = {e.name for e in catalog.exercises()}
    found: dict[str, dict[str, Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and entry.name not in ("grades", ".git"):
            files = found.setdefault(entry.name, {})
            for path in sorted(entry.rglob("*")):
                if (path.is_file() and path.suffix in (".py", ".pyx") and path.stem in names
                        and ".git" not in path.parts):
                    files.setdefault(path.stem, path)
        elif entry.is_file() and "__" in entry.stem and entry.suffix in (".py", ".pyx"):
            student, _, name = entry.stem.rpartition("__")
            if name in names:
                found.setdefault(student, {})[name] = entry
    return found


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


def _check_one(name: str, path: Path, timeout: float) -> tuple[str, dict | None, str, float]:
    """Run one check in a subprocess: (status, report JSON or None, message, seconds)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tinyloop-grade-") as tmp:
        proc = subprocess.Popen([sys.executable, "-m", "tinyloop", "check", name, str(path),
                                 "--format", "json"], cwd=tmp, stdin=subprocess.DEVNULL,
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
            stop_session(proc)  # and whatever the check left behind, its tests included
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


def grade(directory: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
          timeout: float = GRADE_TIMEOUT) -> int:
    """Grade every student's files in ``directory``; write ``OUT/grades.csv`` and
    ``OUT/STUDENT/results.json`` (Gradescope's format: score, max_score, tests).

    Every exercise any student handed in is a row for every student: one who
    did not hand it in gets ``missing``.  Returns 0, or 2 if ``directory``
    holds no student's file.
    """
    folder = Path(directory)
    target = Path(out) if out is not None else folder / "grades"
    students = _student_files(folder) if folder.is_dir() else {}
    order = [e.name for e in catalog.exercises()]
    handed = sorted({n for files in students.values() for n in files}, key=order.index)
    if not handed:
        print(f"tinyloop: no student's exercise file in {folder} (expected STUDENT/NAME.py or "
              "STUDENT__NAME.py, NAME an exercise of `python -m tinyloop exercises`)", file=sys.stderr)
        return 2
    target.mkdir(parents=True, exist_ok=True)
    rows = []
    for student, files in sorted(students.items()):
        tests = []
        for name in handed:
            path = files.get(name)
            why = "missing" if path is None else _unreadable(path)
            if why:
                status, data, message, seconds = why, None, f"{why} file: not graded", 0.0
            else:
                assert path is not None
                status, data, message, seconds = _check_one(name, path, timeout)
            score = 1.0 if status == "passed" else 0.0
            rows.append({"student": student, "exercise": name, "status": status, "score": score,
                         "max_score": 1.0, "seconds": seconds, "message": message,
                         "file": str(path) if path else ""})
            text = ("\n".join(f"{s['status']:<5} {s['text']}" + "".join(f"\n        {d}" for d in s["details"])
                              for s in data["steps"]) if data else message)
            tests.append({"name": name, "score": score, "max_score": 1.0, "status":
                          "passed" if score else "failed", "output": text})
            print(f"{student:<20} {name:<24} {status:<8} {seconds:6.1f} s  {message}", flush=True)
        result = {"score": sum(t["score"] for t in tests), "max_score": float(len(tests)), "tests": tests}
        (target / student).mkdir(exist_ok=True)
        (target / student / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    with open(target / "grades.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {target / 'grades.csv'} and {len(students)} results.json in {target}")
    return 0
