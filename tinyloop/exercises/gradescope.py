"""A Gradescope autograder: ``python -m tinyloop gradescope --exercises A,B --out autograder.zip``.

Gradescope's specification (https://gradescope-autograders.readthedocs.io/en/latest/specs/):
the zip holds ``setup.sh`` and ``run_autograder`` at its root; ``setup.sh``
runs once, as root, when Gradescope builds the autograder's image (Ubuntu),
with the zip unpacked in ``/autograder/source``; ``run_autograder`` runs once
per submission, in ``/autograder``, with the student's files in
``/autograder/submission``, and must write ``/autograder/results/results.json``
(its format: ``gradescope_results.schema.json`` beside this file, a JSON
Schema written from that page).

The zip this module writes:

  setup.sh              installs Python >= 3.11, a C compiler, libuv's headers,
                        git and bubblewrap with apt, unpacks tinyloop into
                        /autograder/tinyloop-checkout and installs it with its
                        ``check`` extra into that folder's .venv
  run_autograder        runs ``python -m tinyloop.exercises.gradescope run``
                        with that Python (below)
  tinyloop.json         the assignment: the exercises, each one's points and
                        rubric, the time limit of one check, the sandbox rule
  tinyloop-COMMIT.tar.gz  this checkout's commit (``git archive``), unless
                        ``--source URL@REF`` names one to clone instead

Why tinyloop travels in the zip: the checker runs the book's own tests
(``tests/``), which a wheel does not carry, so a source tree is needed; the
zip then pins it byte for byte, needs no repository that Gradescope's
builder can reach, and builds the same image every time.  ``--source
URL@REF`` clones a public repository at REF instead (a smaller zip, the
same pin).  Uncommitted changes are not in the archive; the command says so.

``run`` grades the one submission with ``python -m tinyloop grade SUBMISSION
--student submission --exercises ... --out DIR`` (tinyloop/exercises/grading.py),
in tinyloop's sandbox when it can be built there.  Gradescope runs each
submission in a container of its own, which may not allow the namespaces
bubblewrap needs; by default the grade then runs ``--unsandboxed`` inside
Gradescope's container, and says so in the output (``--sandbox required``
instead gives every exercise 0 with the reason).  It then applies the
rubric, if any, and writes results.json.

Rules this module keeps:
  * results.json is always written, whatever the submission holds or
    however grading fails: every assigned exercise is a test, and counts in
    ``max_score``; one not graded scores 0 with the reason.
  * The rubric is checked when the zip is made, not when a student submits:
    unknown exercises, steps an exercise does not have, weights that are not
    positive numbers are errors.
  * Standard library only (it runs in the autograder's image); jsonschema
    checks the format in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from tinyloop.exercises import catalog, checker, classroom
from tinyloop.exercises.model import Exercise

__all__ = ["CONFIG", "RubricError", "SCHEMA", "STUDENT", "apply_rubric", "build", "load_rubric", "main",
           "run", "run_autograder", "setup_script", "step_names"]

CONFIG = "tinyloop.json"
SCHEMA = Path(__file__).with_name("gradescope_results.schema.json")
STUDENT = "submission"  # the name grade files the one submission under
TIMEOUT = 300.0  # seconds: one check, by default (a right solution takes 3-12 s here)
VISIBILITY = "visible"  # each exercise's test, as Gradescope shows it to the student
# Where tinyloop's sandbox cannot be built: "required" gives every exercise 0
# with the reason, "preferred" grades without it in Gradescope's container,
# "never" does not try it.
SANDBOX_RULES = ("preferred", "required", "never")
NOT_SET_UP = ("setup.sh did not install tinyloop (there is no /autograder/tinyloop-checkout/.venv/bin/python): "
              "see the autograder's build log")


class RubricError(Exception):
    """The rubric file cannot be read or does not fit the exercises."""


# --- the rubric: partial credit per exercise ------------------------------------------------

def step_names(exercise: Exercise, root: Path | None = None) -> list[str]:
    """The steps of ``exercise``'s check a rubric may weigh, by the last part of their
    stable test ids (grading.step_ids): ``compiles``, ``written``, ``defines``,
    ``builds`` (a Cython exercise), ``own-tests`` (when it has tests of its own),
    ``tests`` (the wider suites) and each loop property it measures
    (``single-thread``...)."""
    names = ["compiles", "written", "defines"]
    if exercise.extension is not None:
        names.append("builds")
    if checker.own_test_arguments(exercise, root):
        names.append("own-tests")
    names.append("tests")
    names += [p.replace("_", "-") for p in exercise.properties]
    return names


def load_rubric(path: str | os.PathLike[str], exercises: list[Exercise]) -> dict[str, dict]:
    """Read a rubric (TOML, or JSON for a ``.json`` file): a table per exercise,
    ``points`` (its max score, a positive number; default 1) and ``weights``
    (a step of :func:`step_names` -> a positive number)::

        [transport-write]
        points = 4
        weights = { own-tests = 2, tests = 1, single-thread = 1 }

    A passing exercise earns its points; a failing one earns ``points`` times
    the share of the weights whose steps passed; one without weights is all
    or nothing.  Returns {exercise: {"points": float, "weights": {step: float}}}
    for the exercises it names.  Raises :class:`RubricError`.
    """
    source = Path(path)
    try:
        text = source.read_text()
        data = json.loads(text) if source.suffix == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as error:
        raise RubricError(f"cannot read the rubric {source}: {error}") from None
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise RubricError(f"the rubric {source} is not valid {source.suffix == '.json' and 'JSON' or 'TOML'}: "
                          f"{error}") from None
    by_name = {e.name: e for e in exercises}
    rubric: dict[str, dict] = {}
    for name, entry in data.items():
        if name not in by_name:
            raise RubricError(f"the rubric names {name!r}, which is not one of the assigned exercises "
                              f"({', '.join(by_name)})")
        if not isinstance(entry, dict) or set(entry) - {"points", "weights"}:
            raise RubricError(f"rubric [{name}]: expected `points` and `weights` only, got {entry!r}")
        points = entry.get("points", 1)
        weights = entry.get("weights", {})
        if not _positive(points):
            raise RubricError(f"rubric [{name}]: points must be a positive number, got {points!r}")
        if not isinstance(weights, dict):
            raise RubricError(f"rubric [{name}]: weights must be a table of step = weight, got {weights!r}")
        steps = step_names(by_name[name])
        for step, weight in weights.items():
            if step not in steps:
                raise RubricError(f"rubric [{name}]: no step {step!r} in this exercise's check; "
                                  f"its steps are {', '.join(steps)}")
            if not _positive(weight):
                raise RubricError(f"rubric [{name}]: the weight of {step} must be a positive number, "
                                  f"got {weight!r}")
        rubric[name] = {"points": float(points), "weights": {s: float(w) for s, w in weights.items()}}
    return rubric


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _passed_steps(junit: Path, exercise: str) -> set[str] | None:
    """The steps of ``exercise``'s check that passed, read from grade's JUnit file
    (a test case per step, named ``tinyloop.EXERCISE::STEP``); None when the file
    or the exercise's suite is not there."""
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return None
    prefix = f"tinyloop.{exercise}::"
    cases = [c for c in tree.iter("testcase") if (c.get("name") or "").startswith(prefix)]
    if not cases:
        return None
    return {c.get("name", "")[len(prefix):].rstrip("+") for c in cases
            if not any(c.find(kind) is not None for kind in ("failure", "error", "skipped"))}


def apply_rubric(results: dict, rubric: dict[str, dict], junit: Path) -> dict:
    """``results`` (grade's results.json for one submission) with each exercise's
    ``max_score`` and ``score`` set by ``rubric`` (:func:`load_rubric`), the steps
    read from ``junit`` (grade's junit.xml); the total ``score`` added up again.
    A check that never ran a step (a missing file, a time-out) earns nothing."""
    for test in results["tests"]:
        entry = rubric.get(test["name"])
        if entry is None:
            continue
        points, weights = entry["points"], entry["weights"]
        passed = test.get("status") == "passed" and test.get("score") == test.get("max_score")
        if passed:
            score = points
        elif weights:
            done = _passed_steps(junit, test["name"]) or set()
            earned = sum(w for step, w in weights.items() if step in done)
            score = round(points * earned / sum(weights.values()), 4)
            if earned:
                test["output"] = (f"partial credit: {', '.join(s for s in weights if s in done)} passed "
                                  f"({earned:g} of {sum(weights.values()):g} by the rubric's weights)\n"
                                  + test.get("output", ""))
        else:
            score = 0.0
        test["score"], test["max_score"] = score, points
    results["score"] = round(sum(t["score"] for t in results["tests"]), 4)
    return results


# --- the zip ----------------------------------------------------------------------------

def setup_script(commit: str, archive: str | None, source: classroom.Source | None) -> str:
    """setup.sh: each part a function (sourced, it only defines them; the tests
    call them one by one); run as a script, all of them in order.  tinyloop comes
    from ``archive`` (a file beside it) or, when None, from ``source``."""
    return textwrap.dedent(f"""\
        #!/usr/bin/env bash
        # Gradescope runs this once, as root, when it builds the autograder's
        # image (Ubuntu), with the zip unpacked beside it in /autograder/source:
        # https://gradescope-autograders.readthedocs.io/en/latest/specs/
        # Written by `python -m tinyloop gradescope`.  Each part is a function;
        # run as a script it does all of them in order, sourced it defines them.
        set -euo pipefail

        AUTOGRADER="${{AUTOGRADER:-/autograder}}"
        HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
        # Not /autograder/tinyloop: Python puts the working directory, /autograder,
        # first on sys.path, where a folder of that name would shadow the package.
        TINYLOOP_DIR="$AUTOGRADER/tinyloop-checkout"
        # tinyloop, pinned: commit {commit}, from the archive beside this file, or
        # cloned from a URL at a ref when there is no archive.
        TINYLOOP_COMMIT={_q(commit)}
        TINYLOOP_ARCHIVE={_q(archive or "")}
        TINYLOOP_URL={_q(source.url if source else "")}
        TINYLOOP_REF={_q(source.ref if source else "")}

        apt_install() {{
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
        }}

        # A C compiler and libuv's headers build tinyloop.uv (and a student's .pyx);
        # bubblewrap and setpriv (util-linux) build tinyloop's sandbox.
        install_system_packages() {{
            apt-get update -q
            apt_install ca-certificates git gcc libc6-dev pkg-config libuv1-dev bubblewrap util-linux
        }}

        # The newest Python >= 3.11 on PATH, by its path; fails if there is none.
        find_python() {{
            local candidate
            for candidate in python3.13 python3.12 python3.11 python3; do
                if command -v "$candidate" >/dev/null 2>&1 &&
                   "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
                    command -v "$candidate"
                    return 0
                fi
            done
            return 1
        }}

        # Python >= 3.11 with venv and its headers: Ubuntu's own (24.04: 3.12;
        # 22.04: python3.11 in universe), else the deadsnakes PPA.
        install_python() {{
            local version
            for version in 3.13 3.12 3.11; do
                if apt_install "python$version" "python$version-venv" "python$version-dev" >/dev/null 2>&1; then
                    return 0
                fi
            done
            apt_install software-properties-common
            add-apt-repository -y ppa:deadsnakes/ppa
            apt-get update -q
            apt_install python3.11 python3.11-venv python3.11-dev
        }}

        unpack_tinyloop() {{
            rm -rf "$TINYLOOP_DIR"
            mkdir -p "$TINYLOOP_DIR"
            if [ -n "$TINYLOOP_ARCHIVE" ]; then
                tar -xzf "$HERE/$TINYLOOP_ARCHIVE" -C "$TINYLOOP_DIR"
            else
                git init -q "$TINYLOOP_DIR"
                git -C "$TINYLOOP_DIR" fetch -q --depth 1 "$TINYLOOP_URL" "$TINYLOOP_REF"
                git -C "$TINYLOOP_DIR" checkout -q --detach FETCH_HEAD
            fi
        }}

        # tinyloop and what its checks need (the `check` extra) in a venv of its
        # own; the import at the end fails the build if tinyloop.uv did not compile.
        install_tinyloop() {{
            local python venv="$TINYLOOP_DIR/.venv"
            python=$(find_python)
            "$python" -m venv "$venv"
            "$venv/bin/python" -m pip install -q --upgrade pip
            "$venv/bin/python" -m pip install -q -e "${{TINYLOOP_DIR}}[check]"
            "$venv/bin/python" -c 'import tinyloop.uv.loop'
            echo "setup.sh: tinyloop $TINYLOOP_COMMIT installed for $("$venv/bin/python" --version)"
        }}

        main() {{
            install_system_packages
            install_python
            unpack_tinyloop
            install_tinyloop
        }}

        if [ "${{BASH_SOURCE[0]}}" = "$0" ]; then
            main "$@"
        fi
        """)


def run_autograder() -> str:
    """run_autograder: tinyloop's Python grades the submission (:func:`run`); if
    set-up left no such Python, a results.json that says so."""
    return textwrap.dedent(f"""\
        #!/usr/bin/env bash
        # Gradescope runs this for each submission, in /autograder, with the
        # student's files in /autograder/submission; it must write
        # /autograder/results/results.json.  Written by `python -m tinyloop gradescope`.
        set -uo pipefail
        AUTOGRADER="${{AUTOGRADER:-/autograder}}"
        python="$AUTOGRADER/tinyloop-checkout/.venv/bin/python"
        mkdir -p "$AUTOGRADER/results"
        if [ ! -x "$python" ]; then
            printf '%s\\n' {shlex.quote(json.dumps(_broken(NOT_SET_UP)))} > "$AUTOGRADER/results/results.json"
            exit 0
        fi
        exec "$python" -m tinyloop.exercises.gradescope run "$AUTOGRADER/source/{CONFIG}" \\
            "$AUTOGRADER/submission" "$AUTOGRADER/results/results.json"
        """)


def _broken(reason: str) -> dict:
    """A results.json for an autograder that could not grade at all."""
    return {"score": 0.0, "output": f"The autograder could not grade this submission: {reason}",
            "stdout_visibility": "hidden", "tests": []}


def _q(text: str) -> str:
    return shlex.quote(text) if text else "''"


def _archive(root: Path, commit: str) -> bytes:
    """``commit`` of the checkout ``root`` as a .tar.gz (git archive): its tracked files."""
    done = subprocess.run(["git", "archive", "--format=tar.gz", commit], cwd=root, capture_output=True,
                          timeout=120)
    if done.returncode != 0:
        raise OSError(f"git archive failed in {root}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def build(exercises: list[str], out: str | os.PathLike[str], source: str | None = None,
          rubric: str | os.PathLike[str] | None = None, timeout: float = TIMEOUT,
          sandbox: str = "preferred") -> int:
    """Write the autograder zip ``out`` for ``exercises`` (names); ``source``
    ``URL@REF`` to clone instead of shipping this checkout's commit; ``rubric``
    a file for :func:`load_rubric`; ``timeout`` seconds per check; ``sandbox``
    one of :data:`SANDBOX_RULES` (what :func:`run` does where tinyloop's
    sandbox cannot be built).  Returns 0,
    or 2 with a one-line message on standard error (an unknown exercise, a
    bad rubric or source, no git checkout), nothing written."""
    try:
        assigned = [catalog.get(name) for name in exercises]
    except KeyError as error:
        return _error(error.args[0])
    if not assigned:
        return _error("--exercises names no exercise")
    if sandbox not in SANDBOX_RULES:
        return _error(f"--sandbox {sandbox}: expected one of {', '.join(SANDBOX_RULES)}")
    root = checker.repository_root()
    commit = classroom.git_output(root, "rev-parse", "HEAD")
    try:
        rubric_data = load_rubric(rubric, assigned) if rubric is not None else {}
        pinned = classroom.resolve_source(source, root) if source is not None else None
    except (RubricError, classroom.ClassroomError) as error:
        return _error(str(error))
    if pinned is None and not commit:
        return _error(f"{root} is not a git checkout: give --source URL@REF for setup.sh to clone")
    config = {"exercises": [e.name for e in assigned], "timeout": timeout,
              "sandbox": sandbox,
              "rubric": rubric_data, "tinyloop": {"commit": pinned.ref if pinned else commit,
                                                  "url": pinned.url if pinned else None}}
    archive = None if pinned else f"tinyloop-{commit[:12]}.tar.gz"
    files = {"setup.sh": setup_script(config["tinyloop"]["commit"], archive, pinned),
             "run_autograder": run_autograder(), CONFIG: json.dumps(config, indent=1) + "\n"}
    target = Path(out)
    try:
        blob = _archive(root, commit) if archive else b""
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, text in files.items():
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if name in ("setup.sh", "run_autograder") else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, text)
            if archive:
                info = zipfile.ZipInfo(archive, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                zf.writestr(info, blob)  # already compressed
    except OSError as error:
        return _error(f"cannot write {target}: {error}")
    if archive:
        changed = classroom.git_output(root, "status", "--porcelain", "--untracked-files=no", "--", "tinyloop", "tests")
        if changed:
            print(f"tinyloop: warning: {len(changed.splitlines())} uncommitted changes under tinyloop/ and tests/ "
                  f"are not in the zip: it holds commit {commit[:12]}", file=sys.stderr)
    what = f"commit {commit[:12]} inside" if archive else f"{pinned.url} at {pinned.ref}"
    points = sum(rubric_data.get(e.name, {}).get("points", 1.0) for e in assigned)
    print(f"wrote {target}: {len(assigned)} exercises, {points:g} points, tinyloop {what}; upload it as "
          "the assignment's autograder (Configure Autograder > Zip file upload)")
    return 0


def _error(message: str) -> int:
    print(f"tinyloop: {message}", file=sys.stderr)
    return 2


# --- run: one submission, inside Gradescope -----------------------------------------------

def _sandbox_missing() -> str | None:
    """Why tinyloop's sandbox cannot be built here, or None."""
    try:
        from tinyloop.exercises import sandbox
    except ImportError:
        return "this tinyloop has no sandbox"
    return sandbox.available()


def _subreaper(on: bool) -> bool:
    """Make this process the child subreaper of everything it starts, or stop
    (prctl(2), PR_SET_CHILD_SUBREAPER): a process that leaves its session or is
    orphaned by a double fork is then re-parented here instead of to init, so
    :func:`_end_descendants` finds it.  Returns False where that is not available
    (not Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, int(on), 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER (linux/prctl.h)
    except (OSError, AttributeError):
        return False


def _children(live: bool = False) -> list[int]:
    """The pids whose parent is this process (procfs); ``live``: less those that
    have exited and wait to be reaped (state Z)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                # /proc/PID/stat: "pid (comm) state ppid ...", comm may hold spaces and parentheses
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rpartition(")")[2].split()[:2]
            if int(ppid) == me and not (live and state == "Z"):
                found.append(int(entry))
    return found


def _end_descendants(before: set[int], rounds: int = 50) -> int:
    """SIGKILL every child of this process but those in ``before`` (as subreaper,
    every process grade's checks left behind becomes a child here), and reap it;
    a few rounds, for those that fork meanwhile.  Returns how many were killed."""
    import signal
    killed = set()
    for _ in range(rounds):
        for pid in set(_children()) - before:  # orphans that exited: collected, not counted
            _reap(pid)
        pids = [pid for pid in _children(live=True) if pid not in before]
        if not pids:
            break
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
                print(f"killed {pid}, left behind by the checks: {command[:200]}")  # the instructors' log
            except (ProcessLookupError, FileNotFoundError):
                pass
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            if not any(_reap(pid) for pid in killed):
                break
            time.sleep(0.01)
    return len(killed)


def _reap(pid: int) -> bool:
    """Collect ``pid`` if it has exited; True while it has not."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False


def _complete(results: dict | None, exercises: list[str], reason: str) -> dict:
    """``results`` with a test for every assigned exercise (a missing one scores 0,
    ``reason``), in the assigned order, and the total added up."""
    results = dict(results or {})
    found = {t.get("name"): t for t in results.get("tests", [])}
    results["tests"] = [found.get(name) or {"name": name, "score": 0.0, "max_score": 1.0, "status": "failed",
                                            "output": f"not graded: {reason}", "visibility": VISIBILITY}
                        for name in exercises]
    results["score"] = round(sum(t.get("score", 0.0) for t in results["tests"]), 4)
    return results


def run(config_path: str | os.PathLike[str], submission: str | os.PathLike[str],
        results_path: str | os.PathLike[str]) -> int:
    """Grade the submission in ``submission`` by the assignment in ``config_path``
    (the zip's tinyloop.json) and write Gradescope's results.json to
    ``results_path``.  Prints grade's log (Gradescope keeps it for instructors).
    Returns 0 once results.json is written."""
    started = time.monotonic()
    config = json.loads(Path(config_path).read_text())
    exercises, timeout = config["exercises"], float(config["timeout"])
    notes: list[str] = []
    results: dict | None = None
    why = "grading did not finish"
    with tempfile.TemporaryDirectory(prefix="tinyloop-gradescope-") as out:
        command = [sys.executable, "-m", "tinyloop", "grade", str(submission), "--student", STUDENT,
                   "--exercises", ",".join(exercises), "--out", out, "--timeout", f"{timeout:g}"]
        rule = config.get("sandbox", "preferred")
        missing = "this autograder is set to grade without it" if rule == "never" else _sandbox_missing()
        if missing and rule == "required":
            why = f"tinyloop's sandbox cannot be built in this container ({missing}), and this autograder requires it"
            command = []
        elif missing:
            command.append("--unsandboxed")
            notes.append(f"Graded without tinyloop's sandbox ({missing}); Gradescope's container for this "
                         "submission is the boundary.")
        if command:
            # A whole class's worth of slack: each check has its own limit inside grade.
            limit = timeout * len(exercises) + 120
            before = set(_children())
            reaping = _subreaper(True)
            try:
                done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=limit)
            except subprocess.TimeoutExpired:
                why = f"grading took more than {limit:g} s"
                done = None
            finally:
                left = _end_descendants(before) if reaping else 0
                _subreaper(False)
            if left:
                notes.append(f"{left} processes the submission started outlived its checks; they were killed.")
            if done is not None:
                print(done.stdout, end="")
                print(done.stderr, end="", file=sys.stderr)
                last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
                why = f"grading failed: {last}"
                try:
                    results = json.loads((Path(out) / STUDENT / "results.json").read_text())
                except (OSError, ValueError):
                    results = None
        results = _complete(results, exercises, why)
        if config.get("rubric"):
            results = apply_rubric(results, config["rubric"], Path(out) / STUDENT / "junit.xml")
    results["execution_time"] = round(time.monotonic() - started)
    results.setdefault("stdout_visibility", "hidden")
    max_score = sum(t["max_score"] for t in results["tests"])
    head = f"{results['score']:g} of {max_score:g} points"
    results["output"] = "\n".join([head, *notes, *([results["output"]] if results.get("output") else [])])
    target = Path(results_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, target)
    print(f"wrote {target}: {head}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m tinyloop.exercises.gradescope run CONFIG SUBMISSION RESULTS``: what
    run_autograder calls."""
    parser = argparse.ArgumentParser(prog="python -m tinyloop.exercises.gradescope")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="grade one submission, write Gradescope's results.json")
    one.add_argument("config")
    one.add_argument("submission")
    one.add_argument("results")
    args = parser.parse_args(argv)
    return run(args.config, args.submission, args.results)


if __name__ == "__main__":
    sys.exit(main())
