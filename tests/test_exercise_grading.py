# tests/test_exercise_grading.py
#
# The teacher's commands (tinyloop/exercises/grading.py) on real attempts at
# a real exercise, transport-write: the starter, a wrong solution (the
# reported bug), and the bad inputs a class hands in: a file that does not
# parse, loops forever, forks, closes stdin, exhausts descriptors, is empty
# or is binary.  Each must cost only its own row, within the time-out, and
# leave no process behind.

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tinyloop.exercises import catalog, checker, markers

EXERCISE = "transport-write"
ROOT = checker.repository_root()
MARK = "4242.5"  # the forked child's sleep, to find it afterwards


def tinyloop(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tinyloop", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def wrong_solution() -> str:
    """The reference with the reported bug: it fails in the exercise's own tests, in seconds."""
    text = markers.reference(catalog.get(EXERCISE))
    region = text.index(f"# exercise {EXERCISE}: begin")
    at = text.index("if not self._buffer:", region)
    return text[:at] + "if True:" + text[at + len("if not self._buffer:"):]


def with_prelude(prelude: str) -> str:
    """The wrong solution with ``prelude`` run when it is imported."""
    text = wrong_solution()
    at = text.index("from __future__ import annotations\n") + len("from __future__ import annotations\n")
    return text[:at] + prelude + text[at:]


def test_check_speaks_json_and_junit(tmp_path: Path) -> None:
    (tmp_path / f"{EXERCISE}.py").write_text(markers.starter(catalog.get(EXERCISE)))
    done = tinyloop("check", EXERCISE, "--format", "json", cwd=tmp_path)
    data = json.loads(done.stdout)
    assert done.returncode == 1 and data["passed"] is False and data["exercise"] == EXERCISE
    assert any(s["status"] == "FAIL" and "not written yet" in s["text"] for s in data["steps"]), data
    done = tinyloop("check", EXERCISE, "--format", "junit", cwd=tmp_path)
    suite = ET.fromstring(done.stdout)
    assert suite.tag == "testsuite" and int(suite.get("failures", "0")) == 1, done.stdout


@pytest.mark.slow  # a class of students through the checker, about a minute (scripts/test.sh's slow step)
def test_grade_gives_each_student_a_row_and_survives_bad_input(tmp_path: Path) -> None:
    attempts = {
        "starter": markers.starter(catalog.get(EXERCISE)),
        "wrong": wrong_solution(),
        "unparsable": wrong_solution().replace("def write(self", "def write(self,,", 1),
        "forever": with_prelude("while True:\n    pass\n"),
        "forks": with_prelude(f"import os\nif os.fork() == 0:\n    os.execvp('sleep', ['sleep', '{MARK}'])\n"),
        "no-stdin": with_prelude("import os\nos.close(0)\n"),
        "descriptors": with_prelude("_held = []\nwhile True:\n    try:\n        _held.append(open('/dev/null'))\n"
                                    "    except OSError:\n        break\n"),
    }
    folder = tmp_path / "collected"
    for student, text in attempts.items():
        (folder / student).mkdir(parents=True)
        (folder / student / f"{EXERCISE}.py").write_text(text)
    (folder / "empty").mkdir()
    (folder / "empty" / f"{EXERCISE}.py").write_text("\n")
    (folder / "binary").mkdir()
    (folder / "binary" / f"{EXERCISE}.py").write_bytes(b"\x7fELF\x00\x01\x02")
    (folder / "nothing").mkdir()
    (folder / "nothing" / "notes.txt").write_text("no exercise here")
    done = tinyloop("grade", str(folder), "--timeout", "40", cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr
    with open(folder / "grades" / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    status = {student: row["status"] for student, row in rows.items()}
    assert status == {"starter": "failed", "wrong": "failed", "unparsable": "failed", "forever": "timeout",
                      "forks": "failed", "no-stdin": "failed", "descriptors": "failed",
                      "empty": "empty", "binary": "binary", "nothing": "missing"}, status
    assert "does not compile" in rows["unparsable"]["message"], rows["unparsable"]
    assert float(rows["forever"]["seconds"]) < 60, rows["forever"]
    results = json.loads((folder / "grades" / "wrong" / "results.json").read_text())
    assert results["score"] == 0 and results["max_score"] == 1
    assert results["tests"][0]["name"] == EXERCISE and "another order" in results["tests"][0]["output"]
    left = subprocess.run(["pgrep", "-f", f"sleep {MARK}"], capture_output=True, text=True).stdout.split()
    left += _processes_overriding_with(folder)  # a timed-out check's tests, run in a session of their own
    for pid in left:  # clean up before failing, so that one failure does not leak into the next run
        os.kill(int(pid), 9)
    assert not left, f"a student's forked process outlived the grading: {left}"


def _processes_overriding_with(folder: Path) -> list[str]:
    """The pids of processes whose TINYLOOP_OVERRIDE names a file under ``folder``."""
    found: list[str] = []
    if not Path("/proc").is_dir():
        return found  # no procfs (macOS): the pgrep check above still runs
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if f"={folder}/".encode() in environ and b"TINYLOOP_OVERRIDE=" in environ:
            found.append(entry.name)
    return found


def test_progress_lists_every_exercise_by_chapter(tmp_path: Path) -> None:
    (tmp_path / f"{EXERCISE}.py").write_text(markers.starter(catalog.get(EXERCISE)))
    done = tinyloop("progress", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0
    assert f"{EXERCISE}" in done.stdout and "started, not written yet" in done.stdout, done.stdout
    assert "0 of" in done.stdout


def test_watch_checks_again_when_the_file_is_saved(tmp_path: Path) -> None:
    import signal
    import time
    path = tmp_path / f"{EXERCISE}.py"
    path.write_text(markers.starter(catalog.get(EXERCISE)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tinyloop", "watch", EXERCISE], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)
        path.write_text(path.read_text().replace("from __future__ import annotations\n",
                                                 "from __future__ import annotations\nimport os (\n", 1))
        time.sleep(8)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.count(f"check {EXERCISE}:") == 2, out
    assert "not written yet" in out and "does not compile" in out, out
