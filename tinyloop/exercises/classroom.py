"""A student repository for GitHub Classroom: ``python -m tinyloop classroom DIR``.

It holds every exercise's starter, a README, the script that installs
tinyloop at one commit (``.github/classroom/setup-tinyloop.sh``), and the
workflow GitHub Actions runs on every push
(``.github/workflows/classroom.yml``): one step per exercise through
``classroom-resources/autograding-command-grader`` (``python -m tinyloop
check NAME FILE``, one point if it exits 0), then
``classroom-resources/autograding-grading-reporter``, which adds the
points up.  The actions' inputs are those of their ``action.yml``
(github.com/classroom-resources/autograding-command-grader: ``test-name``,
``command``, ``timeout`` in minutes, ``max-score``; the reporter:
``runners``, a comma-separated list of step ids, each step's result in the
environment variable ``<STEP ID IN CAPITALS>_RESULTS``).  The reporter's
README asks for a workflow named ``Autograding Tests`` with one job,
``run-autograding-tests``: GitHub Classroom reads the points from there.

Rules this module keeps:
  * The runner clones tinyloop from a URL it can reach, at a fixed commit:
    ``--source URL[@REF]`` (REF a commit or a tag; without it, the commit of
    this checkout), or this checkout's ``origin`` when that is a URL.  A
    local path cannot be cloned on GitHub, so it is refused, with what to
    give instead.
  * The job installs what ``check`` needs and no more: libuv's headers from
    apt (after ``apt-get update``; ``check`` runs as a student runs it, with
    the audit-hook guard, not grade's sandbox), tinyloop's ``check``
    extra from PyPI (pytest, its time-out plugin, hypothesis, blockbuster,
    Cython), with pip's downloads cached under a key that names the commit.
  * Every exercise's time-out fits the job's: the job's limit is the set-up
    allowance plus each exercise's limit, below GitHub's six hours.
  * The README's set-up is the workflow's set-up: both run the same script.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tinyloop.exercises import catalog, markers
from tinyloop.exercises.model import Exercise

__all__ = ["ClassroomError", "JOB_LIMIT", "SETUP_MINUTES", "TEST_MINUTES", "Source", "classroom",
           "git_output", "minutes", "resolve_source", "workflow"]

# Minutes.  TEST_MINUTES is one exercise's check on the runner: above the
# checker's own limits on a test run (300 s), so a slow check fails with
# the checker's message rather than the action's "Command timed out".
# SETUP_MINUTES covers apt, the clone and pip (the extension's build
# included).  JOB_LIMIT is GitHub-hosted runners' ceiling for one job.
TEST_MINUTES = 6
SETUP_MINUTES = 20
JOB_LIMIT = 360
PYTHON = "3.11"  # the oldest Python tinyloop supports, the one its check times were measured on
SCRIPT = ".github/classroom/setup-tinyloop.sh"
WORKFLOW = ".github/workflows/classroom.yml"

# What a runner (or a student's machine) can clone: a network URL or scp-like
# address.  A file:// URL or a path names a folder on this machine.
_REMOTE = re.compile(r"^(?:https?|ssh|git)://[^/]+/|^[\w.-]+@[\w.-]+:")


class ClassroomError(Exception):
    """The repository cannot be written as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Source:
    """Where the runner gets tinyloop: ``url`` (cloneable from anywhere) at ``ref``
    (a commit id or a tag)."""

    url: str
    ref: str


def resolve_source(source: str | None, root: Path) -> Source:
    """The tinyloop to pin: ``source`` is ``URL`` or ``URL@REF`` (None: this
    checkout's ``origin``), ``root`` the checkout whose commit is used when no
    REF is given.

    Raises :class:`ClassroomError` when the URL is a local path or there is
    none, or when no REF is given and ``root`` is not a git checkout.
    """
    if source is None:
        origin = git_output(root, "remote", "get-url", "origin")
        if not origin:
            raise ClassroomError(f"this checkout ({root}) has no `origin` remote; give the repository "
                                 "students' runners clone with --source URL[@REF] (e.g. "
                                 "--source https://github.com/OWNER/tinyloop@v1.0)")
        url, ref = origin, None
        where = f"this checkout's origin is {origin}"
    else:
        url, ref = _split(source)
        where = f"--source {source}"
    if not _REMOTE.match(url):
        raise ClassroomError(f"{where}, a path on this machine, which GitHub's runners (and your "
                             "students) cannot clone; give --source URL[@REF] with a URL they can "
                             "reach (https://github.com/OWNER/tinyloop, git@github.com:OWNER/tinyloop)")
    if ref is None:
        ref = git_output(root, "rev-parse", "HEAD")
        if not ref:
            raise ClassroomError(f"{root} is not a git checkout, so there is no commit to pin; "
                                 "give --source URL@REF (a commit id or a tag)")
        if not git_output(root, "branch", "-r", "--contains", ref):
            print(f"tinyloop: warning: commit {ref[:12]} is on no remote branch of this checkout: "
                  f"push it to {url} before students clone it", file=sys.stderr)
    return Source(url, ref)


def _split(source: str) -> tuple[str, str | None]:
    """``URL@REF`` -> (URL, REF); the ``@`` of ``git@host:`` is not a REF's."""
    head, at, tail = source.rpartition("@")
    if at and head and "/" not in tail and ":" not in tail:
        return head, tail
    return source, None


def git_output(root: Path, *args: str) -> str:
    """What ``git ARGS`` run in ``root`` prints, stripped; "" when git fails or is not there."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def minutes(count: int) -> tuple[int, int]:
    """(each exercise's time-out, the job's), in minutes, for ``count`` exercises:
    TEST_MINUTES each when the job then stays within JOB_LIMIT, else the
    share of JOB_LIMIT that is left after SETUP_MINUTES."""
    each = min(TEST_MINUTES, (JOB_LIMIT - SETUP_MINUTES) // max(count, 1))
    return each, SETUP_MINUTES + each * count


def _step_id(exercise: Exercise) -> str:
    # A step id: letters, digits, '-' and '_', starting with a letter; the
    # reporter reads the result from <ID IN CAPITALS>_RESULTS.
    return exercise.name


def setup_script(source: Source) -> str:
    """The shell script that puts tinyloop at ``source`` in ../tinyloop and installs
    it, with its ``check`` extra, into the Python that runs the checks."""
    return textwrap.dedent(f"""\
        #!/usr/bin/env bash
        # Puts tinyloop, at the commit these exercises are graded against, in
        # ../tinyloop (beside this repository) and installs it, with what its
        # checks need, into the Python named by $PYTHON (default: python).  The
        # autograding workflow runs it; so do you, once, from this folder.
        set -euo pipefail
        url={_quote(source.url)}
        ref={_quote(source.ref)}
        dest="${{TINYLOOP_DIR:-../tinyloop}}"
        python="${{PYTHON:-python}}"
        [ -d "$dest/.git" ] || git init -q "$dest"
        git -C "$dest" fetch -q --depth 1 "$url" "$ref"
        git -C "$dest" checkout -q --detach FETCH_HEAD
        "$python" -m pip install -q -e "${{dest}}[check]"
        echo "tinyloop $(git -C "$dest" rev-parse --short HEAD) is installed for $("$python" --version)"
        """)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def workflow(source: Source, exercises: list[Exercise]) -> str:
    """The GitHub Actions workflow: set-up, one grader step per exercise, the reporter."""
    each, job = minutes(len(exercises))
    steps = []
    for exercise in exercises:
        step = _step_id(exercise)
        steps.append(textwrap.indent(textwrap.dedent(f"""\
            - name: {exercise.name}
              id: {step}
              uses: classroom-resources/autograding-command-grader@v1
              with:
                test-name: {exercise.name}
                command: {markers.check_command(exercise.name, markers.default_file(exercise))}
                timeout: {each}
                max-score: 1
            """), " " * 6))
    results = "".join(f"          {_step_id(e).upper()}_RESULTS: \"${{{{ steps.{_step_id(e)}.outputs.result }}}}\"\n"
                      for e in exercises)
    runners = ",".join(_step_id(e) for e in exercises)
    head = textwrap.dedent(f"""\
        # GitHub Classroom's autograding: one step per exercise (python -m tinyloop
        # check NAME FILE, one point if it passes), then the reporter that adds
        # the points up.  Written by `python -m tinyloop classroom`; the name of
        # the workflow and of its job are the ones GitHub Classroom reads.
        name: Autograding Tests
        "on":
          push:
          workflow_dispatch:
        permissions:
          checks: write
          actions: read
          contents: read
        jobs:
          run-autograding-tests:
            runs-on: ubuntu-latest
            if: github.actor != 'github-classroom[bot]'
            # {SETUP_MINUTES} min of set-up, then {each} min at most for each of the {len(exercises)} exercises
            timeout-minutes: {job}
            steps:
              - name: Checkout code
                uses: actions/checkout@v4
              - uses: actions/setup-python@v5
                with:
                  python-version: "{PYTHON}"
              - name: Cache pip's downloads (the key names tinyloop's commit)
                uses: actions/cache@v4
                with:
                  path: ~/.cache/pip
                  key: pip-${{{{ runner.os }}}}-python{PYTHON}-tinyloop-{source.ref}
              - name: System packages the checks need (libuv, for the libuv chapter)
                run: |
                  sudo apt-get update -q
                  sudo apt-get install -y -q libuv1-dev
              - name: tinyloop at {source.ref[:12]}, whose tests grade the exercises
                run: bash {SCRIPT}
        """)
    reporter = textwrap.indent(textwrap.dedent("""\
        - name: Autograding Reporter
          uses: classroom-resources/autograding-grading-reporter@v1
          env:
        """), " " * 6) + results + f"        with:\n          runners: {runners}\n"
    return head + "".join(steps) + reporter


def readme(source: Source, exercises: list[Exercise]) -> str:
    """The student's README: set-up (the workflow's own script), checking, the list."""
    each, _ = minutes(len(exercises))
    lines = []
    for chapter in dict.fromkeys(e.chapter for e in exercises):
        lines.append(f"\n### {chapter}\n")
        for exercise in (e for e in exercises if e.chapter == chapter):
            filename = markers.default_file(exercise)
            lines.append(f"- `{filename}`: {exercise.title} "
                         f"(`{markers.check_command(exercise.name, filename)}`)")
    return textwrap.dedent(f"""\
        # tinyloop exercises

        Each file here is an exercise of the tinyloop book, with the part you
        write cut out: find the `raise NotImplementedError` between the
        `# exercise NAME: begin` and `# exercise NAME: end` markers, and write
        your code there (some exercises have more than one such place).  The
        comment at the top of each file says what the code must do, and the
        book's chapter explains why.

        ## Set up once

        You need Linux or macOS, Python 3.11 or newer and git; for the libuv
        chapter also a C compiler and libuv's headers (Debian and Ubuntu:
        `sudo apt-get install gcc libuv1-dev`; macOS: `brew install libuv`).
        In this folder:

            python3 -m venv .venv
            source .venv/bin/activate
            bash {SCRIPT}

        The script puts tinyloop at commit `{source.ref}` of {source.url}
        in `../tinyloop`, beside this folder, and installs it into `.venv`
        with what the checks need: the same commit and the same script as
        the grading on GitHub.

        ## Check your work

        With `.venv` active, check an exercise as often as you like (a wrong
        solution fails in seconds, a right one takes under a minute):

            python -m tinyloop check NAME FILE
            python -m tinyloop progress       # which exercises pass, by chapter

        Every push runs the same checks on GitHub (the Actions tab), at most
        {each} minutes each; each exercise that passes is worth one point.

        ## The exercises
        """) + "\n".join(lines) + "\n"


def classroom(directory: str | Path, source: str | None = None) -> int:
    """Write a student repository into ``directory`` (new, or an empty folder):
    every exercise's starter, ``README.md``, the set-up script and the workflow.

    ``source`` is ``URL`` or ``URL@REF`` (see :func:`resolve_source`; None: this
    checkout's ``origin`` at this checkout's commit).  Returns 0, or 2 (a message
    on standard error, nothing written) if ``directory`` is in use or the source
    cannot be cloned by a runner.
    """
    from tinyloop.exercises.checker import repository_root
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        print(f"tinyloop: {target} is not an empty folder; give a new one", file=sys.stderr)
        return 2
    try:
        pinned = resolve_source(source, repository_root())
    except ClassroomError as error:
        print(f"tinyloop: {error}", file=sys.stderr)
        return 2
    exercises = list(catalog.exercises())
    target.mkdir(parents=True, exist_ok=True)
    for exercise in exercises:
        filename = markers.default_file(exercise)
        (target / filename).write_text(markers.starter(exercise, filename))
    for path, text in ((SCRIPT, setup_script(pinned)), (WORKFLOW, workflow(pinned, exercises))):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text)
    (target / SCRIPT).chmod(0o755)
    (target / ".gitignore").write_text("__pycache__/\n.venv/\n.hypothesis/\n")
    (target / "README.md").write_text(readme(pinned, exercises))
    print(f"wrote {len(exercises)} starters, README.md, {SCRIPT} and {WORKFLOW} in {target} "
          f"(tinyloop {pinned.url} at {pinned.ref})")
    return 0

