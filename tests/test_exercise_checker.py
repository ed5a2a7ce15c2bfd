# tests/test_exercise_checker.py
#
# The checker against the wrong solutions students actually wrote, on the
# real exercises (tests/test_exercises.py tests its machinery on a fixture
# exercise): each case below applies one reported mistake to the reference
# solution, exactly, and asserts that `check` fails it, and says why in
# the student's words.  Then a crash and an import failure, which must
# each get their own message, and a file that deletes what is not its own.

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tinyloop.exercises import catalog, checker, markers


def mutated(exercise_name: str, tmp_path: Path, old: str, new: str) -> Path:
    """The reference of ``exercise_name`` with ``old`` replaced by ``new`` once,
    inside the exercise's region, written where a student keeps it."""
    exercise = catalog.get(exercise_name)
    text = markers.reference(exercise)
    begin, end, at = f"# exercise {exercise_name}: begin", f"# exercise {exercise_name}: end", -1
    start = text.find(begin)
    while start >= 0 and at < 0:
        stop = text.index(end, start)
        at = text.find(old, start, stop)
        start = text.find(begin, stop)
    assert at >= 0, f"{old!r} is in no region of {exercise_name}"
    path = tmp_path / Path(markers.default_file(exercise)).name
    path.write_text(text[:at] + new + text[at + len(old):])
    return path


def test_transport_write_sending_while_bytes_wait_is_caught(tmp_path: Path) -> None:
    # Reported: `if not self._buffer:` -> `if True:` sends a later write at
    # once while older bytes wait: 1 MB to a slow reader, then b"Z", and Z
    # arrived at offset 8,064.  The checker used to say PASSED.
    path = mutated("transport-write", tmp_path, "if not self._buffer:", "if True:")
    report = checker.check(catalog.get("transport-write"), path)
    text = report.render()
    assert not report.passed, text
    assert "another order" in text and "test_transport_write_delivers_every_byte_once_in_order" in text, text
    assert "the exercise's own tests" in text, f"the own tests must be what fails, first:\n{text}"


CRASHING_TEST = '''\
import os, signal
import exercise_crash


def test_it_does_not_crash():
    assert exercise_crash.work() == 1
'''

CRASH_MODULE = '''\
__all__ = ["work"]


def work():
    # exercise crash-demo: begin
    return 1
    # exercise crash-demo: end
'''


@pytest.fixture
def crash_exercise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tinyloop.exercises.model import Exercise
    (tmp_path / "exercise_crash.py").write_text(CRASH_MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_crash.py").write_text(CRASHING_TEST)
    monkeypatch.syspath_prepend(str(tmp_path))
    return Exercise(name="crash-demo", chapter="fixtures", title="Return one",
                    module="exercise_crash", instructions="Return 1.", tests=("tests/test_crash.py",))


@pytest.mark.parametrize("how", ["os.kill(os.getpid(), signal.SIGSEGV)", "ctypes.string_at(0)"])
def test_a_crash_is_reported_as_a_crash_with_the_test_and_the_line(crash_exercise, tmp_path: Path,
                                                                   how: str) -> None:
    student = tmp_path / "student"
    student.mkdir()
    path = student / "crash-demo.py"
    body = CRASH_MODULE.replace("    return 1\n", f"    import ctypes, os, signal\n    {how}\n    return 1\n")
    path.write_text(body)
    report = checker.check(crash_exercise, path, root=tmp_path)
    text = report.render()
    assert not report.passed
    assert "CRASHED (SIGSEGV) in test_it_does_not_crash — your file crashed the interpreter" in text, text
    line = body.splitlines().index(f"    {how}") + 1
    assert f"line {line}, in work" in text, f"the crash must name line {line} of the file:\n{text}"
    assert "imported" not in text, f"a crash is not an import failure:\n{text}"


def test_an_import_failure_is_not_a_crash_and_shows_its_traceback(crash_exercise, tmp_path: Path) -> None:
    student = tmp_path / "student"
    student.mkdir()
    path = student / "crash-demo.py"
    body = CRASH_MODULE.replace('__all__ = ["work"]\n', '__all__ = ["work"]\n\n\ndef helper():\n'
                                '    return {}["key"]\n\n\nhelper()\n')
    path.write_text(body)
    report = checker.check(crash_exercise, path, root=tmp_path)
    text = report.render()
    assert not report.passed
    assert "your file fails when it is imported at line" in text and "CRASHED" not in text, text
    assert "in helper: return {}[\"key\"]" in text and "KeyError: 'key'" in text, text


# --- a file that deletes what is not its own (tinyloop/exercises/guard.py) ------------

@pytest.mark.parametrize("how", ["os.remove(PATH)", "shutil.rmtree(os.path.dirname(PATH))",
                                 "open(PATH, 'w').close()"])
@pytest.mark.parametrize("caught", [False, True], ids=["raised", "caught"])
def test_a_file_that_deletes_outside_its_temporary_directory_fails_and_deletes_nothing(
        crash_exercise, tmp_path: Path, how: str, caught: bool) -> None:
    # A directory beside the check's, made here: the student's code is told
    # its path and tries to delete (or empty) the file in it.  Caught or not,
    # the PermissionError of the guard must turn into a FAIL that names it.
    sibling = Path(tempfile.mkdtemp(prefix="tl-sibling-"))
    try:
        precious = sibling / "precious.txt"
        precious.write_text("keep me")
        student = tmp_path / "student"
        student.mkdir()
        path = student / "crash-demo.py"
        call = f"{how.replace('PATH', repr(str(precious)))}"
        if caught:
            call = f"try:\n        {call}\n    except OSError:\n        pass"
        path.write_text(CRASH_MODULE.replace("    return 1\n", f"    import os, shutil\n    {call}\n    return 1\n"))
        report = checker.check(crash_exercise, path, root=tmp_path)
        text = report.render()
        assert not report.passed, text
        verb = "overwrite" if how.startswith("open") else "delete"
        target = precious if verb == "overwrite" or how.startswith("os.remove") else sibling
        assert f"your code tried to {verb} {target}, outside the check's temporary directory" in text, text
        assert precious.read_text() == "keep me"
        assert not [pid for pid in _processes_in(tmp_path)], "the check left a process behind"
    finally:
        shutil.rmtree(sibling)


def test_a_file_may_delete_what_it_made_itself(crash_exercise, tmp_path: Path) -> None:
    # tempfile's directories are in the check's own; one made under /tmp by
    # the code itself (a short path for a UNIX socket) is its own too.
    student = tmp_path / "student"
    student.mkdir()
    path = student / "crash-demo.py"
    path.write_text(CRASH_MODULE.replace("    return 1\n", (
        "    import os, shutil, tempfile\n"
        "    shutil.rmtree(tempfile.mkdtemp())\n"
        "    mine = tempfile.mkdtemp(dir='/tmp')\n"
        "    open(os.path.join(mine, 's'), 'w').close()\n"
        "    os.remove(os.path.join(mine, 's'))\n"
        "    os.rmdir(mine)\n"
        "    return 1\n")))
    report = checker.check(crash_exercise, path, root=tmp_path)
    assert report.passed, report.render()


def _processes_in(folder: Path) -> list[int]:
    """The pids of processes whose working directory is ``folder`` (the checker's tests run there)."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow  # compiles the extension with the student's file first (scripts/test.sh's slow step)
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the extension")
def test_uv_write_batch_without_the_requests_reference_crashes_and_says_so(tmp_path: Path) -> None:
    from tinyloop import stages
    why = stages.get("uv").unavailable()
    if why:
        pytest.skip(why)
    exercise = catalog.get("uv-write-batch")
    text = markers.reference(exercise)
    if "Py_INCREF(request)" not in text:
        pytest.skip("the reference no longer holds the request with Py_INCREF(request)")
    path = mutated("uv-write-batch", tmp_path, "Py_INCREF(request)", "pass  # Py_INCREF(request)")
    report = checker.check(exercise, path)
    rendered = report.render()
    assert not report.passed, rendered
    if "CRASHED" not in rendered:
        pytest.skip(f"this build did not crash without the reference (freed memory reused late):\n{rendered}")
    assert "imported" not in rendered and "reference count" in rendered, rendered
    assert signal.SIGSEGV.name in rendered or "SIGABRT" in rendered or "SIGBUS" in rendered, rendered


# --- our mutation operators (tinyloop/exercises/mutants.py) -------------------------------

def test_our_operators_make_one_line_changes_inside_the_regions() -> None:
    from tinyloop.exercises import mutants
    seen = set()
    for exercise in catalog.exercises():
        filename = Path(markers.default_file(exercise)).name
        text = markers.reference(exercise, filename)
        regions = [r for r in markers.find_regions(text, filename) if r.name == exercise.name]
        for mutant in mutants.mutants(exercise.name, text, filename):
            seen.add(mutant.operator)
            assert any(r.begin < mutant.line < r.end for r in regions), (exercise.name, mutant)
            before, after = text.splitlines(), mutant.text.splitlines()
            assert len(before) == len(after), (exercise.name, mutant.line)
            changed = [i + 1 for i, (a, b) in enumerate(zip(before, after)) if a != b]
            assert changed == [mutant.line], (exercise.name, mutant.line, changed)
            if not markers.is_cython(filename):
                compile(mutant.text, filename, "exec")
    assert seen == set(mutants.OPERATORS), f"operators that never applied: {set(mutants.OPERATORS) - seen}"


def test_the_hand_written_wrong_solutions_still_apply_to_the_reference() -> None:
    import importlib.util
    root = checker.repository_root()
    spec = importlib.util.spec_from_file_location("mutation", root / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    mutation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutation)
    for name in mutation.HAND_WRITTEN:
        exercise = catalog.get(name)
        text = markers.reference(exercise, Path(markers.default_file(exercise)).name)
        cases = mutation._hand_written(exercise, text)  # SystemExit if a case no longer applies
        assert all(mutated != text for _, _, mutated in cases)
