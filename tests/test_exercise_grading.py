"""The teacher's commands (tinyloop/exercises/grading.py) on real attempts at
real exercises: the starter, wrong solutions, and the bad inputs a class hands
in (a file that does not parse, loops forever, forks, closes stdin, exhausts
descriptors, is empty, binary or misnamed, forges a report, detaches a
child).  Each must cost only its own row, within the time-out, and leave no
process behind; a class graded with ``--jobs 2`` gets the expected CSV, the
same as with ``--jobs 1``; the outputs are read as Gradescope and JUnit
tools read them.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import junitparser
import psutil
import pytest

from tinyloop.exercises import catalog, checker, grading, markers

EXERCISE = "transport-write"
ROOT = checker.repository_root()
MARK = "4242.5"  # the forked child's sleep, to find it afterwards


def tinyloop(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # The cache folder in the test's own: a test never writes the user's progress.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cwd / ".cache")}
    return subprocess.run([sys.executable, "-m", "tinyloop", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# grade's flags for credit here: sandboxed where the sandbox can be built (a
# fresh clone's set-up installs bubblewrap), else --unsandboxed.
SANDBOX_MISSING = grading.sandbox_missing()
SANDBOX = ("--unsandboxed",) if SANDBOX_MISSING else ()


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
    assert [s["id"] for s in data["steps"]] == [f"tinyloop.{EXERCISE}::compiles", f"tinyloop.{EXERCISE}::written"]
    done = tinyloop("check", EXERCISE, "--format", "junit", cwd=tmp_path)
    suite = junitparser.TestSuite.fromstring(done.stdout)
    assert (suite.tests, suite.failures, suite.errors) == (2, 1, 0) and suite.time > 0, done.stdout
    cases = {case.name: case for case in suite}
    assert set(cases) == {f"tinyloop.{EXERCISE}::compiles", f"tinyloop.{EXERCISE}::written"}, done.stdout
    failure = cases[f"tinyloop.{EXERCISE}::written"].result[0]
    assert isinstance(failure, junitparser.Failure) and failure.message.startswith("not written yet: line")
    assert not (tmp_path / ".cache").exists(), "json and junit are a teacher's tools: no progress recorded"
    tinyloop("check", EXERCISE, cwd=tmp_path)
    assert (tmp_path / ".cache" / "tinyloop" / "progress.json").exists(), "a student's check is recorded"


def test_step_ids_are_stable_whatever_the_counts_and_timings() -> None:
    def steps(passed: int, seconds: float) -> list[dict]:
        texts = ["the file compiles", "the exercise is written", "it defines what tinyloop.callbacks.loop does",
                 f"tests: {passed} passed (the exercise's own tests, stopped at the first failure)",
                 f"tests: 1 failed, {passed} passed; stopped there (test_servers.py)",
                 f"idle_cpu: {seconds} s of CPU while idle for 1 s",
                 f"slow_client: 20 quick GETs took {seconds} s while one client sent its request"]
        return [{"status": "ok", "text": t, "details": []} for t in texts]
    ids = grading.step_ids("run-once", steps(5, 0.01))
    assert ids == grading.step_ids("run-once", steps(80, 2.5))
    assert [i.split("::")[1] for i in ids] == ["compiles", "written", "defines", "own-tests", "tests",
                                               "idle-cpu", "slow-client"], ids
    assert all(i.startswith("tinyloop.run-once::") for i in ids)
    # A step that names itself keeps its id; two steps never share one.
    named = grading.step_ids("run-once", [{"status": "ok", "text": "x", "details": [], "id": "sandbox"}] * 2)
    assert named == ["tinyloop.run-once::sandbox", "tinyloop.run-once::sandbox+"]


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
    done = tinyloop("grade", str(folder), "--timeout", "40", *SANDBOX, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr
    with open(folder / "grades" / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    status = {student: row["status"] for student, row in rows.items()}
    assert status == {"starter": "failed", "wrong": "failed", "unparsable": "failed", "forever": "timeout",
                      "forks": "failed", "no-stdin": "failed", "descriptors": "failed",
                      "empty": "empty", "binary": "binary", "nothing": "missing"}, status
    assert "does not compile" in rows["unparsable"]["reason"], rows["unparsable"]
    forever = json.loads((folder / "grades" / "forever" / "results.json").read_text())
    assert forever["execution_time"] < 60, forever
    results = json.loads((folder / "grades" / "wrong" / "results.json").read_text())
    assert results["score"] == 0 and sum(t["max_score"] for t in results["tests"]) == 1
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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    import threading
    proc = subprocess.Popen([sys.executable, "-m", "tinyloop", "watch", EXERCISE], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)

    def wait_for(text: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not any(text in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.1)

    try:
        reader.start()
        wait_for("not written yet")
        time.sleep(0.05)  # a save the poll tells from the first by its time or size
        path.write_text(path.read_text().replace("from __future__ import annotations\n",
                                                 "from __future__ import annotations\nimport os (\n", 1))
        wait_for("does not compile")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(5)
        err = proc.stderr.read()
    out = "".join(lines)
    assert proc.returncode == 0, err
    assert out.count(f"check {EXERCISE}:") == 2, out
    assert "not written yet" in out and "does not compile" in out, out


# --- a class: assigned exercises, misnamed files, one student's submission -----------------

def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_grade_scores_missing_and_misnamed_files_against_the_assigned_set(tmp_path: Path) -> None:
    folder = tmp_path / "class"
    for name in ("misnamed", "nothing", "results", "source"):
        (folder / name).mkdir(parents=True)
    (folder / "misnamed" / "run_once.py").write_text("x = 1\n")
    (folder / "misnamed" / "Trap-Sleep.py").write_text("x = 1\n")
    (folder / "misnamed" / "transport-write.txt").write_text("x = 1\n")
    (folder / "source" / "run-once.py").write_text("x = 1\n")  # Gradescope's folders are no student
    (folder / "flat__trap_sleep.py").write_text("x = 1\n")
    done = tinyloop("grade", str(folder), "--exercises", "run-once,trap-sleep,transport-write", *SANDBOX,
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = _rows(folder / "grades" / "grades.csv")
    got = [(r["student"], r["exercise"], r["status"], r["score"], r["failed_test"], r["reason"]) for r in rows]
    assert got == [
        ("flat", "run-once", "missing", "0.0", "tinyloop.run-once::file", "no file flat__run-once.py in the submission"),
        ("flat", "trap-sleep", "misnamed", "0.0", "tinyloop.trap-sleep::file",
         "found flat__trap_sleep.py: expected flat__trap-sleep.py"),
        ("flat", "transport-write", "missing", "0.0", "tinyloop.transport-write::file",
         "no file flat__transport-write.py in the submission"),
        ("misnamed", "run-once", "misnamed", "0.0", "tinyloop.run-once::file", "found run_once.py: expected run-once.py"),
        ("misnamed", "trap-sleep", "misnamed", "0.0", "tinyloop.trap-sleep::file",
         "found Trap-Sleep.py: expected trap-sleep.py"),
        ("misnamed", "transport-write", "misnamed", "0.0", "tinyloop.transport-write::file",
         "found transport-write.txt: expected transport-write.py"),
        ("nothing", "run-once", "missing", "0.0", "tinyloop.run-once::file", "no file run-once.py in the submission"),
        ("nothing", "trap-sleep", "missing", "0.0", "tinyloop.trap-sleep::file", "no file trap-sleep.py in the submission"),
        ("nothing", "transport-write", "missing", "0.0", "tinyloop.transport-write::file",
         "no file transport-write.py in the submission"),
    ], got
    # Only misnamed files: a results.json all the same, out of every assigned exercise.
    results = json.loads((folder / "grades" / "misnamed" / "results.json").read_text())
    assert results["score"] == 0 and [t["max_score"] for t in results["tests"]] == [1.0, 1.0, 1.0]
    assert "found run_once.py: expected run-once.py" in results["tests"][0]["output"]
    suites = junitparser.JUnitXml.fromfile(str(folder / "grades" / "misnamed" / "junit.xml"))
    assert (suites.tests, suites.failures, suites.errors) == (3, 3, 0)
    assert tinyloop("grade", str(folder), "--exercises", "run-once,nope", cwd=tmp_path).returncode == 2


def test_grade_takes_one_students_submission_as_gradescope_lays_it_out(tmp_path: Path) -> None:
    autograder = tmp_path / "autograder"
    submission = autograder / "submission"
    for name in ("submission", "results", "source"):
        (autograder / name).mkdir(parents=True)
    (submission / "run_once.py").write_text("x = 1\n")
    done = tinyloop("grade", str(submission), "--exercises", "run-once,trap-sleep", cwd=tmp_path)
    assert done.returncode == 2 and "--student" in done.stderr, done.stderr
    out = tmp_path / "out"
    done = tinyloop("grade", str(submission), "--student", "ada", "--exercises", "run-once,trap-sleep",
                    "--out", str(out), *SANDBOX, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "ada" / "results.json").read_text())
    # Gradescope's documented keys, and no others (gradescope-autograders.readthedocs.io, "Output format").
    assert set(results) == {"score", "execution_time", "output", "stdout_visibility", "tests"}, results
    assert [(t["name"], t["score"], t["max_score"], t["status"]) for t in results["tests"]] == \
        [("run-once", 0.0, 1.0, "failed"), ("trap-sleep", 0.0, 1.0, "failed")]
    assert all(set(t) == {"name", "score", "max_score", "status", "output", "visibility"} for t in results["tests"])
    assert "found run_once.py: expected run-once.py" in results["tests"][0]["output"]
    # ... and valid against the JSON Schema written from that page (tinyloop/exercises/gradescope.py's).
    jsonschema = pytest.importorskip("jsonschema")
    schema = Path(grading.__file__).with_name("gradescope_results.schema.json")
    jsonschema.validate(results, json.loads(schema.read_text()))


def test_grade_refuses_to_grade_for_credit_without_the_sandbox(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / "run-once.py").write_text("x = 1\n")
    monkeypatch.setattr(grading, "sandbox_missing", lambda: "user namespaces are off here")
    assert grading.grade(tmp_path, exercises=["run-once"]) == 2
    err = capsys.readouterr().err
    assert "user namespaces are off here" in err and "--unsandboxed" in err, err
    assert not (tmp_path / "grades").exists(), "nothing graded, nothing written"


def test_grade_reuses_a_verdict_for_the_same_file_and_leaves_the_teachers_progress(tmp_path: Path) -> None:
    folder = tmp_path / "class"
    (folder / "ada").mkdir(parents=True)
    (folder / "ada" / "trap-sleep.py").write_text(markers.starter(catalog.get("trap-sleep")))
    args = ("grade", str(folder), "--exercises", "trap-sleep", "--jobs", "2", *SANDBOX)
    first = tinyloop(*args, cwd=tmp_path)
    assert first.returncode == 0 and "[1/1] ada" in first.stdout, first.stdout + first.stderr
    row = _rows(folder / "grades" / "grades.csv")[0]
    assert (row["status"], row["failed_test"]) == ("failed", "tinyloop.trap-sleep::written"), row
    again = tinyloop(*args, cwd=tmp_path)
    assert "graded before" in again.stdout and "0 checks run" in again.stdout, again.stdout
    assert _rows(folder / "grades" / "grades.csv") == [row]
    forced = tinyloop(*args, "--force", cwd=tmp_path)
    assert "[1/1] ada" in forced.stdout and "1 checks run" in forced.stdout, forced.stdout
    (folder / "ada" / "trap-sleep.py").write_text(markers.starter(catalog.get("trap-sleep")) + "# changed\n")
    changed = tinyloop(*args, cwd=tmp_path)
    assert "1 checks run" in changed.stdout, changed.stdout
    assert not (tmp_path / ".cache" / "tinyloop" / "progress.json").exists(), \
        "grade wrote the teacher's own progress file"


def test_grade_interrupted_stops_its_running_checks_at_once(tmp_path: Path) -> None:
    import signal
    import time
    mark = "4244.5"
    folder = tmp_path / "class"
    (folder / "ada").mkdir(parents=True)
    (folder / "ada" / "trap-sleep.py").write_text(_prelude(markers.reference(catalog.get("trap-sleep")),
                                                           f"import os\nos.system('sleep {mark}')\n"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    proc = subprocess.Popen([sys.executable, "-m", "tinyloop", "grade", str(folder), "--exercises", "trap-sleep",
                             "--timeout", "600", *SANDBOX], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _sleeping(mark):
            time.sleep(0.2)
        assert _sleeping(mark), "the check never reached the student's code"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # not the 600 s of the check's limit
        assert proc.returncode == 130 and "interrupted" in err, out + err
        assert not (folder / "grades" / "grades.csv").exists(), "no CSV from half a class"
    finally:
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 20
        while _sleeping(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _sleeping(mark)
        for process in left:
            process.kill()
    assert not left, f"the interrupted check's processes outlived grade: {left}"


def _sleeping(mark: str) -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if mark in " ".join(p.info["cmdline"] or [])]


def _record_many(cache: str, folder: str, start: int) -> None:
    os.environ["XDG_CACHE_HOME"] = cache
    from tinyloop.exercises.checker import Report, Step
    exercise = catalog.get("trap-sleep")
    for index in range(start, start + 25):
        path = Path(folder, f"{index}.py")
        path.write_text(f"# {index}\n")
        grading.record(Report(exercise, path, [Step("ok", "fine")]))


def test_progress_keeps_every_verdict_of_checks_run_at_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_record_many, args=(str(tmp_path / "cache"), str(tmp_path), n * 25))
               for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert all(w.exitcode == 0 for w in workers)
    seen = json.loads((tmp_path / "cache" / "tinyloop" / "progress.json").read_text())
    assert len(seen) == 100, f"{100 - len(seen)} verdicts lost by writers running at once"


# --- a class graded in parallel, end to end -------------------------------------------------

ASSIGNED = ["trap-sleep", "trampoline-return", "run-once"]
HOSTILE_MARK = "4243.5"  # the hostile student's detached child's sleep


def _replace(name: str, old: str, new: str) -> str:
    text = markers.reference(catalog.get(name))
    assert text.count(old) == 1, (name, old)
    return text.replace(old, new)


def _prelude(text: str, prelude: str) -> str:
    at = text.index("from __future__ import annotations\n") + len("from __future__ import annotations\n")
    return text[:at] + prelude + text[at:]


# At import: forge a passing JUnit report wherever a --junitxml option points,
# leave a child in a session of its own, and, in the checker's test process
# (``python -c ...``, which loads the file before pytest), exit 0 before any
# test runs.
FORGER = f"""import os, sys
for _arg in sys.argv:
    if _arg.startswith("--junitxml="):
        with open(_arg.split("=", 1)[1], "w") as _f:
            _f.write('<testsuite tests="3"><testcase classname="t" name="a"/><testcase classname="t" '
                     'name="b"/><testcase classname="t" name="c"/></testsuite>')
if os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "{HOSTILE_MARK}"])
if sys.argv[0] == "-c":
    os._exit(0)
"""


def _class(folder: Path) -> None:
    """Seven students: correct, untouched starter, subtly wrong, hanging, hostile,
    misnamed, and one who handed in nothing."""
    wrong_sleep = _replace("trap-sleep", "timer = self.loop.call_later(seconds, self._step, task, None, None)",
                           "timer = self.loop.call_later(seconds, self._step, task, seconds, None)")
    files = {
        "correct": {f"{n}.py": markers.reference(catalog.get(n)) for n in ASSIGNED},
        "starter": {f"{n}.py": markers.starter(catalog.get(n)) for n in ASSIGNED},
        "wrong": {"trap-sleep.py": wrong_sleep,
                  "trampoline-return.py": _replace("trampoline-return", "value, exc = stop.value, None",
                                                   "value, exc = None, None")},
        "hanging": {"trap-sleep.py": _prelude(markers.reference(catalog.get("trap-sleep")),
                                              "while True:\n    pass\n")},
        "hostile": {"trap-sleep.py": _prelude(wrong_sleep, FORGER)},
        "misnamed": {"run_once.py": markers.reference(catalog.get("run-once")),
                     "Trap-Sleep.py": markers.reference(catalog.get("trap-sleep")),
                     "trampoline-return.txt": markers.reference(catalog.get("trampoline-return"))},
        "nothing": {"notes.txt": "nothing handed in"},
    }
    for student, texts in files.items():
        (folder / student).mkdir(parents=True)
        for name, text in texts.items():
            (folder / student / name).write_text(text)


# (student, exercise) -> (status, failed test); every other pair is "missing".
EXPECTED = {
    **{("correct", n): ("passed", "") for n in ASSIGNED},
    **{("starter", n): ("failed", f"tinyloop.{n}::written") for n in ASSIGNED},
    ("wrong", "trap-sleep"): ("failed", "tinyloop.trap-sleep::own-tests::"
                                        "test_trap_sleep_resumes_after_the_given_seconds_with_none"),
    ("wrong", "trampoline-return"): ("failed", "tinyloop.trampoline-return::own-tests::"
                                               "test_trampoline_return_a_callee_returns_its_value_to_the_caller"),
    ("hanging", "trap-sleep"): ("timeout", None),
    ("hostile", "trap-sleep"): ("failed", "tinyloop.trap-sleep::own-tests"),  # its tests never reported
    **{("misnamed", n): ("misnamed", f"tinyloop.{n}::file") for n in ASSIGNED},
}


@pytest.mark.slow  # ten checks and a 40 s hang, twice (--jobs 2, then --jobs 1): about three minutes
@pytest.mark.timeout(1200)
@pytest.mark.skipif(SANDBOX_MISSING is not None, reason=f"no sandbox here: {SANDBOX_MISSING}")
def test_a_class_graded_in_parallel_gets_the_expected_csv(tmp_path: Path) -> None:
    folder = tmp_path / "class"
    _class(folder)
    args = ("grade", str(folder), "--exercises", ",".join(ASSIGNED), "--timeout", "40")
    try:
        done = tinyloop(*args, "--jobs", "2", "--out", str(tmp_path / "two"), cwd=tmp_path, timeout=900)
        assert done.returncode == 0, done.stderr
        rows = _rows(tmp_path / "two" / "grades.csv")
        assert [(r["student"], r["exercise"]) for r in rows] == \
            [(s, n) for s in sorted(["correct", "starter", "wrong", "hanging", "hostile", "misnamed", "nothing"])
             for n in ASSIGNED], "one row per student and assigned exercise, in order"
        for row in rows:
            status, failed_test = EXPECTED.get((row["student"], row["exercise"]),
                                               ("missing", f"tinyloop.{row['exercise']}::file"))
            where = f"{row['student']}/{row['exercise']}: {row}"
            assert row["status"] == status and float(row["score"]) == (status == "passed"), where
            assert failed_test is None or row["failed_test"] == failed_test, where
            assert (row["reason"] == "") == (status == "passed"), where
        by = {(r["student"], r["exercise"]): r for r in rows}
        assert by["wrong", "trap-sleep"]["reason"] == \
            "the sleep must return None (step with (task, None, None)); it returned 2.5"
        assert by["misnamed", "run-once"]["reason"] == "found run_once.py: expected run-once.py"
        assert by["hostile", "trap-sleep"]["failed_test"].startswith("tinyloop.trap-sleep::")
        assert "timeout" in by["hanging", "trap-sleep"]["failed_test"] or \
            by["hanging", "trap-sleep"]["failed_test"].startswith("tinyloop.trap-sleep::")
        for student in ("correct", "hostile", "nothing"):
            results = json.loads((tmp_path / "two" / student / "results.json").read_text())
            assert sum(t["max_score"] for t in results["tests"]) == len(ASSIGNED), results
            suites = junitparser.JUnitXml.fromfile(str(tmp_path / "two" / student / "junit.xml"))
            cases = [case for suite in suites for case in suite]
            assert suites.tests == len(cases) and all(c.name.startswith("tinyloop.") for c in cases)
            assert suites.failures + suites.errors == sum(1 for c in cases if c.result and not c.is_skipped)
        assert json.loads((tmp_path / "two" / "correct" / "results.json").read_text())["score"] == 3
        # The same class, one check at a time: the same CSV, byte for byte.
        done = tinyloop(*args, "--jobs", "1", "--out", str(tmp_path / "one"), cwd=tmp_path, timeout=900)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "one" / "grades.csv").read_text() == (tmp_path / "two" / "grades.csv").read_text()
    finally:
        left = [p for p in psutil.process_iter(["cmdline"]) if HOSTILE_MARK in " ".join(p.info["cmdline"] or [])]
        for process in left:  # clean up before failing, so one failure does not leak into the next run
            process.kill()
    assert not left, f"a student's detached child outlived the grading: {left}"


@pytest.mark.slow  # four whole checks, ~30 s on 2 cores: the slow step runs it
@pytest.mark.parametrize("right", [True, False], ids=["right", "wrong"])
def test_a_check_without_overlap_gives_the_same_verdict_and_starts_no_moot_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, right: bool) -> None:
    # grade runs checks with overlap=False: one step after another, so a
    # check keeps one core and --jobs spreads the class.  The verdict and
    # its steps must be those of the overlapping check a student runs, and
    # a file whose own tests fail must not start the wider suites' pytest.
    exercise = catalog.get("run-once")
    path = tmp_path / "run-once.py"
    path.write_text(markers.reference(exercise, path.name) if right else
                    markers.reference(exercise, path.name).replace(
                        "            handle = self._ready.popleft()\n", "            handle = self._ready.pop()\n"))
    started: list[list[str]] = []
    start = checker._start_tests

    def counting(root, override, options, arguments, *args, **kwargs):
        started.append(list(arguments))
        return start(root, override, options, arguments, *args, **kwargs)

    monkeypatch.setattr(checker, "_start_tests", counting)
    reports = {}
    for overlap in (True, False):
        started.clear()
        reports[overlap] = checker.check(exercise, path, quick=True, overlap=overlap)
        starts = len(started)
        if overlap:
            assert starts == 2  # the wide step starts with the own tests, whatever they give
        else:
            assert starts == (2 if right else 1)
    steps = {overlap: [(s.status, s.text.split(":")[0]) for s in r.steps] for overlap, r in reports.items()}
    assert reports[True].passed is reports[False].passed is right
    assert steps[True] == steps[False]
