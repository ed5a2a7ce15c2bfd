"""``python -m tinyloop classroom`` (tinyloop/exercises/classroom.py): the student
repository it writes, the refusal of a source GitHub's runners cannot clone,
the workflow under actionlint (rhysd/actionlint, the linter GitHub Actions
users run; scripts/setup.sh installs it where Go is), the set-up script under
shellcheck and run for real against this checkout (git's ``insteadOf`` points
the pinned URL here), and, in the slow step, the README's set-up in a fresh
virtual environment from PyPI, followed by a check that fails a starter and
passes the reference.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tinyloop.exercises import catalog, checker, classroom, markers

ROOT = checker.repository_root()
URL = "https://example.org/tinyloop"


def tinyloop(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tinyloop", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def older_commit() -> str:
    """The commit before HEAD (HEAD itself in a clone of depth 1): a pin that is not
    simply what a checkout holds."""
    done = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD~1"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def write(tmp_path: Path, source: str) -> Path:
    target = tmp_path / "class"
    done = tinyloop("classroom", str(target), "--source", source, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return target


def tool(name: str) -> str | None:
    """``name`` on PATH, or where ``go install`` puts it (scripts/setup.sh)."""
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    found = shutil.which(name) or shutil.which(name, path=str(Path(gopath) / "bin"))
    return found


def test_classroom_writes_a_student_repository(tmp_path: Path) -> None:
    ref = "0123456789abcdef0123456789abcdef01234567"
    target = write(tmp_path, f"{URL}@{ref}")
    exercises = catalog.exercises()
    for exercise in exercises:
        text = (target / markers.default_file(exercise)).read_text()
        assert markers.unwritten_lines(text, exercise.name), f"{exercise.name}: not a starter"
    flow = (target / classroom.WORKFLOW).read_text()
    # The names GitHub Classroom reads, and the current actions (not education/autograding@v1).
    assert re.search(r"^name: Autograding Tests$", flow, re.M) and "\n  run-autograding-tests:\n" in flow
    assert "education/autograding" not in flow
    ids = re.findall(r"^      - name: (\S+)\n        id: (\S+)\n        uses: "
                     r"classroom-resources/autograding-command-grader@v1$", flow, re.M)
    assert [i for _, i in ids] == [e.name for e in exercises]
    for exercise in exercises:
        command = markers.check_command(exercise.name, markers.default_file(exercise))
        assert f"          command: {command}\n" in flow, exercise.name
        assert f"{exercise.name.upper()}_RESULTS: \"${{{{ steps.{exercise.name}.outputs.result }}}}\"" in flow
    runners = re.search(r"runners: (\S+)", flow).group(1).split(",")
    assert runners == [e.name for e in exercises]
    # Per-test time-outs that fit the job, which fits GitHub's ceiling.
    each = {int(m) for m in re.findall(r"^          timeout: (\d+)$", flow, re.M)}
    job = int(re.search(r"timeout-minutes: (\d+)", flow).group(1))
    assert len(each) == 1 and job >= classroom.SETUP_MINUTES + each.pop() * len(exercises)
    assert job <= classroom.JOB_LIMIT
    # Pinned, updated before installing, the light extra, the pip cache keyed by the commit.
    assert flow.index("sudo apt-get update") < flow.index("sudo apt-get install")
    assert f"tinyloop-{ref}" in flow and "path: ~/.cache/pip" in flow
    script = (target / classroom.SCRIPT).read_text()
    assert f"url='{URL}'" in script and f"ref='{ref}'" in script and "[check]" in script
    assert "[dev]" not in flow + script
    readme = (target / "README.md").read_text()
    assert f"bash {classroom.SCRIPT}" in readme and ref in readme and URL in readme
    for exercise in exercises:
        assert f"`{markers.check_command(exercise.name, markers.default_file(exercise))}`" in readme
    assert tinyloop("classroom", str(target), "--source", URL, cwd=tmp_path).returncode == 2, \
        "a folder in use is refused"


def test_the_job_time_limit_holds_every_exercise() -> None:
    assert classroom.minutes(23) == (6, 20 + 6 * 23)
    each, job = classroom.minutes(200)  # more exercises than six hours hold at 6 min each
    assert each >= 1 and job <= classroom.JOB_LIMIT


@pytest.mark.parametrize("source", [None, "/home/teacher/tinyloop", "file:///srv/tinyloop@main", "../tinyloop"])
def test_a_source_the_runner_cannot_clone_is_refused(tmp_path: Path, source: str | None) -> None:
    repo = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "/home/teacher/tinyloop"], check=True)
    with pytest.raises(classroom.ClassroomError, match="--source URL"):
        classroom.resolve_source(source, repo)


def test_the_command_refuses_with_nothing_written(tmp_path: Path) -> None:
    done = tinyloop("classroom", str(tmp_path / "class"), "--source", str(ROOT), cwd=tmp_path)
    assert done.returncode == 2 and "cannot clone" in done.stderr and "--source URL" in done.stderr, done.stderr
    assert not (tmp_path / "class").exists()


def test_source_forms(tmp_path: Path) -> None:
    assert classroom.resolve_source("git@github.com:o/tinyloop.git@v1.0", ROOT) == \
        classroom.Source("git@github.com:o/tinyloop.git", "v1.0")
    assert classroom.resolve_source(f"{URL}@abc123", ROOT) == classroom.Source(URL, "abc123")
    # No REF: the commit of this checkout, in full.
    assert classroom.resolve_source(URL, ROOT) == classroom.Source(URL, head())


def test_the_workflow_passes_actionlint(tmp_path: Path) -> None:
    actionlint = tool("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (scripts/setup.sh installs it with `go install` where Go is)")
    target = write(tmp_path, f"{URL}@v1.0")
    done = subprocess.run([actionlint, "-no-color", classroom.WORKFLOW], cwd=target, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    # actionlint does read it: a reporter that names a step that is not there fails.
    flow = target / classroom.WORKFLOW
    flow.write_text(flow.read_text().replace("steps.run-once.outputs", "steps.run-twice.outputs"))
    done = subprocess.run([actionlint, "-no-color", classroom.WORKFLOW], cwd=target, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "run-twice" in done.stdout, done.stdout


def test_the_setup_script_fetches_the_pinned_commit(tmp_path: Path) -> None:
    """The workflow's and the README's set-up, run here: git fetches the pinned commit
    (the URL rewritten to this checkout); pip is a recorder, the slow test runs it."""
    pinned = older_commit()
    target = write(tmp_path, f"{URL}@{pinned}")
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        done = subprocess.run([shellcheck, classroom.SCRIPT], cwd=target, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f'[url "file://{ROOT}"]\n\tinsteadOf = {URL}\n')
    recorder = tmp_path / "python"
    recorder.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "pip-args"}\n')
    recorder.chmod(0o755)
    done = subprocess.run(["bash", classroom.SCRIPT], cwd=target, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": str(gitconfig), "PYTHON": str(recorder)})
    assert done.returncode == 0, done.stderr
    fetched = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path / "tinyloop", capture_output=True,
                             text=True, check=True).stdout.strip()
    assert fetched == pinned
    assert "-m pip install -q -e ../tinyloop[check]" in (tmp_path / "pip-args").read_text()


@pytest.mark.slow  # a fresh virtual environment from PyPI, tinyloop.uv compiled: a few minutes
@pytest.mark.timeout(1500)
def test_the_readme_setup_is_enough_to_check(tmp_path: Path) -> None:
    """The README's commands in a fresh venv, then a check: the ``check`` extra is all it needs."""
    target = write(tmp_path, f"{URL}@{head()}")
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f'[url "file://{ROOT}"]\n\tinsteadOf = {URL}\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["GIT_CONFIG_GLOBAL"] = str(gitconfig)
    readme = (target / "README.md").read_text()
    setup = readme.split("## Set up once", 1)[1].split("## Check your work", 1)[0]
    commands = [line.strip() for line in setup.splitlines() if line.startswith("    ")]
    assert commands == ["python3 -m venv .venv", "source .venv/bin/activate", f"bash {classroom.SCRIPT}"]
    python = shutil.which("python3.11") or sys.executable
    done = subprocess.run(["bash", "-c", "set -e; " + "; ".join(commands).replace("python3 ", f"{python} ", 1)],
                          cwd=target, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    name = "transport-write"  # the stream properties (hypothesis) and the conformance suite (blockbuster)
    exercise = catalog.get(name)
    solution = target / markers.default_file(exercise)
    check = [str(target / ".venv" / "bin" / "python"), "-m", "tinyloop", "check", name, solution.name]
    done = subprocess.run(check, cwd=target, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "not written yet" in done.stdout, done.stdout + done.stderr
    solution.write_text(markers.reference(exercise, solution.name))
    done = subprocess.run(check, cwd=target, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout + done.stderr
