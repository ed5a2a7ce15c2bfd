"""``python -m tinyloop gradescope`` (tinyloop/exercises/gradescope.py): the autograder
zip, run as Gradescope runs it.

Gradescope's harness (https://gradescope-autograders.readthedocs.io/en/latest/specs/)
unpacks the zip in ``/autograder/source``, copies ``run_autograder`` to
``/autograder/run_autograder``, puts the student's files in
``/autograder/submission`` and runs it in ``/autograder``, then reads
``/autograder/results/results.json``.  These tests build that layout in a
bubblewrap sandbox (a mount namespace of its own, the system read-only), with
this checkout, whose .venv holds tinyloop, where setup.sh would have put it:
setup.sh's package installs need the network and Ubuntu, so its parts are
tested apart (bash -n, shellcheck, the unpacked commit, the Python it picks).
Every results.json is validated against the schema written from Gradescope's
page (jsonschema).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import jsonschema
import pytest

from test_exercise_classroom import older_commit
from tinyloop.exercises import catalog, checker, gradescope, grading, markers

ROOT = checker.repository_root()
EXERCISES = ["run-once", "trap-sleep"]  # two quick Python exercises (3-6 s each for a right one)
SCHEMA = json.loads(gradescope.SCHEMA.read_text())


def tinyloop(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tinyloop", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def validate(results: dict) -> None:
    jsonschema.validate(results, SCHEMA, cls=jsonschema.Draft202012Validator)


def make_zip(folder: Path, *options: str, exercises: list[str] = EXERCISES) -> Path:
    """Build FOLDER/autograder.zip and unpack it, as Gradescope does, into FOLDER/source:
    returns that folder."""
    folder.mkdir(parents=True, exist_ok=True)
    done = tinyloop("gradescope", "--exercises", ",".join(exercises), "--out", str(folder / "autograder.zip"),
                    *options, cwd=folder)
    assert done.returncode == 0, done.stderr
    source = folder / "source"
    with zipfile.ZipFile(folder / "autograder.zip") as zf:
        zf.extractall(source)
        for info in zf.infolist():  # zipfile does not restore modes
            os.chmod(source / info.filename, info.external_attr >> 16)
    return source


def bwrap_works() -> str | None:
    """Why a bubblewrap sandbox cannot be made here, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (scripts/setup.sh installs it)"
    done = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-pid", "true"], capture_output=True, text=True)
    return None if done.returncode == 0 else f"bwrap cannot make a sandbox here: {done.stderr.strip()}"


def autograde(tmp_path: Path, source: Path, files: dict[str, str | bytes], installed: bool = True,
              timeout: float = 600) -> tuple[dict, subprocess.CompletedProcess]:
    """Run ``run_autograder`` as Gradescope would, on a submission of ``files``
    (name -> text); ``installed``: tinyloop where setup.sh puts it.  Returns the
    results.json it wrote, and the run."""
    why = bwrap_works()
    if why:
        pytest.skip(why)
    submission, results = tmp_path / "submission", tmp_path / "results"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(results, ignore_errors=True)
    submission.mkdir()
    results.mkdir()
    for name, content in files.items():
        (submission / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (submission / name).write_bytes(content)
        else:
            (submission / name).write_text(content)
    system = []
    for top in ("bin", "lib", "lib64", "sbin"):  # merged /usr (Debian, Ubuntu): symlinks into /usr
        path = Path("/") / top
        if path.is_symlink():
            system += ["--symlink", os.readlink(path), str(path)]
        elif path.exists():
            system += ["--ro-bind", str(path), str(path)]
    # The private /tmp first: bwrap mounts in order, and a checkout under /tmp
    # (CI's clean clone) must be bound on top of it, not hidden by it.
    command = ["bwrap", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session",
               "--tmpfs", "/tmp",
               "--ro-bind", "/usr", "/usr", *system, "--ro-bind", "/etc", "/etc",
               "--ro-bind", sys.base_prefix, sys.base_prefix, "--ro-bind", str(ROOT), str(ROOT),
               "--dev", "/dev", "--proc", "/proc", "--setenv", "HOME", "/tmp",
               "--dir", "/autograder",
               "--ro-bind", str(source), "/autograder/source",
               "--ro-bind", str(source / "run_autograder"), "/autograder/run_autograder",
               "--ro-bind", str(submission), "/autograder/submission",
               "--bind", str(results), "/autograder/results",
               *(["--ro-bind", str(ROOT), "/autograder/tinyloop-checkout"] if installed else []),
               "--chdir", "/autograder", "/autograder/run_autograder"]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    data = json.loads((results / "results.json").read_text())
    validate(data)
    return data, done


def wrong(name: str, prelude: str = "") -> str:
    """``name``'s starter with its region "written" as ``pass`` (its tests then fail),
    and ``prelude`` run when the file is imported."""
    text = markers.starter(catalog.get(name))
    text = text.replace(markers.placeholder(name), "pass", 1)
    at = text.index("from __future__ import annotations\n") + len("from __future__ import annotations\n")
    return text[:at] + prelude + text[at:]


# --- the format ----------------------------------------------------------------------------

def test_the_schema_is_gradescopes_documented_format() -> None:
    # The example of the page's "Output format", its comments taken out.
    example = {"score": 44.0, "execution_time": 136, "output": "Text relevant to the entire submission",
               "output_format": "simple_format", "test_output_format": "text", "test_name_format": "text",
               "visibility": "after_due_date", "stdout_visibility": "visible", "extra_data": {},
               "tests": [{"score": 2.0, "max_score": 2.0, "status": "passed", "name": "Your name here",
                          "name_format": "text", "number": "1.1", "output": "Giant multiline string",
                          "output_format": "text", "tags": ["tag1", "tag2", "tag3"], "visibility": "visible",
                          "extra_data": {}}],
               "leaderboard": [{"name": "Accuracy", "value": .926}, {"name": "Time", "value": 15.1, "order": "asc"},
                               {"name": "Stars", "value": "*****"}]}
    validate(example)
    validate({"score": 1, "tests": [{"name": "Compilation check", "status": "passed"}]})  # "Test case status"
    for broken in ({"tests": [{"name": "no score anywhere", "status": "passed"}]},
                   {"score": 1, "tests": [{"score": 1, "max-score": 1}]},
                   {"score": 1, "stdout_visibility": "students"},
                   {"score": 1, "tests": [{"score": 1, "status": "partial"}]},
                   {"score": "1"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


# --- the zip ------------------------------------------------------------------------------

def test_the_zip_holds_setup_run_autograder_and_the_commit(tmp_path: Path) -> None:
    source = make_zip(tmp_path)
    with zipfile.ZipFile(tmp_path / "autograder.zip") as zf:
        names = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = f"tinyloop-{commit[:12]}.tar.gz"
    assert set(names) == {"setup.sh", "run_autograder", gradescope.CONFIG, archive}, names  # at the root
    assert names["setup.sh"] & 0o111 and names["run_autograder"] & 0o111
    config = json.loads((source / gradescope.CONFIG).read_text())
    assert config["exercises"] == EXERCISES and config["tinyloop"]["commit"] == commit
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", source / script]).returncode == 0, script
        if shutil.which("shellcheck"):
            done = subprocess.run(["shellcheck", source / script], capture_output=True, text=True)
            assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("options, message", [
    (["--exercises", "run-once,no-such-thing"], "no exercise called 'no-such-thing'"),
    (["--exercises", "run-once", "--source", "/home/teacher/tinyloop@main"], "cannot clone"),
    (["--exercises", "run-once", "--rubric", "RUBRIC"], "no step 'propertys'"),
])
def test_bad_input_is_refused_with_nothing_written(tmp_path: Path, options: list[str], message: str) -> None:
    (tmp_path / "rubric.toml").write_text('[run-once]\npoints = 2\nweights = { tests = 1, propertys = 1 }\n')
    options = [str(tmp_path / "rubric.toml") if o == "RUBRIC" else o for o in options]
    done = tinyloop("gradescope", *options, "--out", str(tmp_path / "a.zip"), cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "a.zip").exists()


def source_functions(source: Path, body: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``body`` in bash with setup.sh sourced (its functions defined, none run)."""
    return subprocess.run(["bash", "-c", f"set -euo pipefail; source {source / 'setup.sh'}; {body}"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def test_setup_unpacks_the_pinned_commit(tmp_path: Path) -> None:
    source = make_zip(tmp_path)
    done = source_functions(source, "unpack_tinyloop; find_python", {"AUTOGRADER": str(tmp_path / "ag")})
    assert done.returncode == 0, done.stderr
    python = done.stdout.strip().splitlines()[-1]
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True).stdout.strip()
    assert version == "True", python
    unpacked = tmp_path / "ag" / "tinyloop-checkout"
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    found = sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file() or p.is_symlink())
    assert found == sorted(listed)
    for name in ("tinyloop/exercises/checker.py", "tests/test_exercise_callbacks.py"):
        committed = subprocess.run(["git", "show", f"HEAD:{name}"], cwd=ROOT, capture_output=True, check=True).stdout
        assert (unpacked / name).read_bytes() == committed, name


def test_setup_clones_a_source_at_its_ref(tmp_path: Path) -> None:
    url = "https://example.org/tinyloop"
    ref = older_commit()
    source = make_zip(tmp_path, "--source", f"{url}@{ref}")
    assert not list(source.glob("*.tar.gz")), "nothing shipped: setup.sh clones"
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f'[url "file://{ROOT}"]\n\tinsteadOf = {url}\n')
    done = source_functions(source, "unpack_tinyloop", {"AUTOGRADER": str(tmp_path / "ag"),
                                                        "GIT_CONFIG_GLOBAL": str(gitconfig)})
    assert done.returncode == 0, done.stderr
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path / "ag" / "tinyloop-checkout",
                          capture_output=True, text=True, check=True).stdout.strip()
    assert head == ref


# --- the rubric ---------------------------------------------------------------------------

def test_a_rubric_gives_partial_credit_by_the_checks_steps(tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[run-once]\npoints = 4\nweights = { compiles = 1, written = 1, tests = 2 }\n'
                      '[trap-sleep]\npoints = 2\n')
    table = gradescope.load_rubric(rubric, [catalog.get(n) for n in EXERCISES])
    assert table == {"run-once": {"points": 4.0, "weights": {"compiles": 1.0, "written": 1.0, "tests": 2.0}},
                     "trap-sleep": {"points": 2.0, "weights": {}}}
    steps = [{"status": "ok", "text": "the file compiles", "details": []},
             {"status": "ok", "text": "the exercise is written", "details": []},
             {"status": "ok", "text": "it defines what tinyloop.callbacks.loop does", "details": []},
             {"status": "FAIL", "text": "tests: 1 failed, 3 passed (the exercise's own tests)",
              "details": ["test_run_once_x (tests/test_exercise_callbacks.py)", "  it ran nothing"]}]
    for step, test_id in zip(steps, grading.step_ids("run-once", steps)):
        step["id"] = test_id
    junit = tmp_path / "junit.xml"
    suite = grading.junit_suite("run-once", {"steps": steps}, 1.0, "failed")
    junit.write_text(grading.ET.tostring(suite, encoding="unicode"))
    results = {"score": 0.0, "tests": [
        {"name": "run-once", "score": 0.0, "max_score": 1.0, "status": "failed", "output": "FAILED"},
        {"name": "trap-sleep", "score": 1.0, "max_score": 1.0, "status": "passed", "output": "PASSED"}]}
    scored = gradescope.apply_rubric(results, table, junit)
    validate(scored)
    # compiles and written passed (2 of 4 by weight); the tests did not: half of 4 points.
    assert [(t["score"], t["max_score"]) for t in scored["tests"]] == [(2.0, 4.0), (2.0, 2.0)]
    assert scored["score"] == 4.0 and scored["tests"][0]["output"].startswith("partial credit: compiles, written")


def test_a_rubric_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.json"
    for text, message in (('{"run-once": {"points": 0}}', "positive"),
                          ('{"run-once": {"weights": {"tests": -1}}}', "positive"),
                          ('{"uv-timer-heap": {}}', "not one of the assigned"),
                          ('{"run-once": {"weights": {"builds": 1}}}', "no step 'builds'"),
                          ('{"run-once": {"point": 1}}', "expected `points` and `weights`"),
                          ('{"run-once": ', "not valid JSON")):
        rubric.write_text(text)
        with pytest.raises(gradescope.RubricError, match=message):
            gradescope.load_rubric(rubric, [catalog.get(n) for n in EXERCISES])


# --- run_autograder, as Gradescope runs it -------------------------------------------------

def test_misnamed_and_missing_files_get_results_with_reasons(tmp_path: Path) -> None:
    source = make_zip(tmp_path)
    data, done = autograde(tmp_path, source, {"run_once.py": "x = 1\n", "notes/Trap-Sleep.txt": "y\n"})
    assert done.returncode == 0, done.stderr
    assert data["score"] == 0 and [t["max_score"] for t in data["tests"]] == [1.0, 1.0]
    outputs = [t["output"] for t in data["tests"]]
    assert "found run_once.py: expected run-once.py" in outputs[0], outputs
    assert "found Trap-Sleep.txt: expected trap-sleep.py" in outputs[1], outputs
    data, done = autograde(tmp_path, source, {"README.md": "I forgot\n"})
    assert [t["name"] for t in data["tests"]] == EXERCISES and data["score"] == 0
    assert "no file run-once.py" in data["tests"][0]["output"], data
    assert sum(t["max_score"] for t in data["tests"]) == 2.0, "every assigned exercise counts"


def test_an_autograder_whose_setup_failed_says_so(tmp_path: Path) -> None:
    source = make_zip(tmp_path)
    data, done = autograde(tmp_path, source, {"run-once.py": "x = 1\n"}, installed=False)
    assert data["score"] == 0 and "setup.sh did not install tinyloop" in data["output"], data


def test_without_the_sandbox_the_rule_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where tinyloop's sandbox cannot be built (a container without user namespaces):
    by default grade runs --unsandboxed and says so; --require-sandbox scores 0 with the reason."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setattr(gradescope, "_sandbox_missing", lambda: "no user namespaces here")
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "run_once.py").write_text("x = 1\n")
    for rule, expect in (("preferred", "Graded without tinyloop's sandbox (no user namespaces here)"),
                         ("required", "no user namespaces here")):
        config = tmp_path / f"{rule}.json"
        config.write_text(json.dumps({"exercises": EXERCISES, "timeout": 60, "sandbox": rule, "rubric": {}}))
        assert gradescope.run(config, submission, tmp_path / rule / "results.json") == 0
        data = json.loads((tmp_path / rule / "results.json").read_text())
        validate(data)
        text = data["output"] + "".join(t["output"] for t in data["tests"])
        assert expect in text and data["score"] == 0, data
    assert "found run_once.py" in json.loads((tmp_path / "preferred" / "results.json").read_text())["tests"][0]["output"]


@pytest.mark.slow  # four checks in the sandbox, about a minute
@pytest.mark.timeout(900)
def test_correct_hostile_and_unwritten_students(tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[run-once]\npoints = 2\nweights = { compiles = 1, written = 1, tests = 2 }\n')
    source = make_zip(tmp_path / "rubric", "--rubric", str(rubric))
    correct = {markers.default_file(catalog.get(n)): markers.reference(catalog.get(n)) for n in EXERCISES}
    data, done = autograde(tmp_path, source, correct)
    assert [(t["score"], t["max_score"]) for t in data["tests"]] == [(2.0, 2.0), (1.0, 1.0)], \
        json.dumps(data, indent=1) + done.stderr
    assert data["score"] == 3.0 and "outlived" not in data["output"], data["output"]
    # Hostile: a forged results.json written at import, again and again by a detached
    # child, and a shell command that deletes the autograder's files.
    forged = json.dumps({"score": 100.0, "tests": []})
    prelude = (f"import os, time\n"
               f"def _forge():\n"
               f"    try:\n"
               f"        open('/autograder/results/results.json', 'w').write({forged!r})\n"
               f"    except OSError:\n"
               f"        pass\n"
               f"_forge()\n"
               f"os.system('rm -rf /autograder/source /autograder/submission 2>/dev/null')\n"
               f"if os.fork() == 0:\n"
               f"    os.setsid()\n"
               f"    for _ in range(600):\n"
               f"        _forge()\n"
               f"        time.sleep(0.1)\n"
               f"    os._exit(0)\n")
    hostile = {markers.default_file(catalog.get(n)): wrong(n, prelude) for n in EXERCISES}
    plain = make_zip(tmp_path / "plain")  # all or nothing: the hostile file earns nothing
    data, done = autograde(tmp_path, plain, hostile)
    assert data["score"] == 0 and [t["max_score"] for t in data["tests"]] == [1.0, 1.0], data
    assert (plain / "setup.sh").exists() and (tmp_path / "submission" / "run-once.py").exists()
    time.sleep(1)
    assert json.loads((tmp_path / "results" / "results.json").read_text()) == data, "rewritten after the run"
    # The same without tinyloop's sandbox (a container that does not allow it): the
    # forger runs with the grader's rights, but nothing it started outlives grading
    # (run_autograder is their subreaper and kills them), so results.json is ours.
    bare = make_zip(tmp_path / "bare", "--sandbox", "never")
    data, done = autograde(tmp_path, bare, hostile)
    assert data["score"] == 0 and "outlived its checks; they were killed" in data["output"], data
    assert "Graded without tinyloop's sandbox" in data["output"], data
    # Unwritten: the starters; the rubric gives run-once's "compiles" its share.
    starters = {markers.default_file(catalog.get(n)): markers.starter(catalog.get(n)) for n in EXERCISES}
    data, done = autograde(tmp_path, source, starters)
    assert [t["score"] for t in data["tests"]] == [0.5, 0.0], data
    assert "not written yet" in data["tests"][1]["output"], data
