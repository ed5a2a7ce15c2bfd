# noxfile.py
#
# The asyncio contract on every Python the machine has.  asyncio moved
# between 3.11, 3.12 and 3.13 (eager tasks, loop_factory, Server.close_clients,
# policy deprecations), so the suites that hold tinyloop.aio and tinyloop.uv
# to it run once per CPython found:
#
#     tests/conformance/            one suite over asyncio, uvloop, aio and uv
#     tests/test_aio_*.py           TLS, Unix, the real programs, debug mode,
#                                   the stage's stop on SIGTERM (not the tests
#                                   marked slow: see the session)
#     tests/test_uv_loop.py         Part IV's own tests, on that Python's build
#
# Left to the main run (scripts/test.sh's default step), because they test
# our own code above asyncio's contract and no asyncio version changes them:
# the HTTP suite on the aio and uv servers (tests/test_servers.py) and the
# plumbing of benchmarks/aio_changes.py (tests/test_aio_changes.py).
#
# Part IV's extension is compiled for each Python by the session's editable
# install (setup.py; Cython comes from pyproject's build requirements); where
# libuv is missing it is not built, and its rows are skipped, saying why.
#
# Rules this file keeps:
#   * Interpreters are found, never downloaded: python3.X on PATH, then
#     under ~/.pyenv/versions (or $PYENV_ROOT).  A version that is absent is
#     skipped with a message; it is not an error.
#   * The Python running nox is left out: the main pytest run (scripts/test.sh)
#     has just covered it.  TINYLOOP_NOX_ALL=1 keeps it in.
#   * Each session's virtual environment lives under .nox/ (git-ignored) and
#     gets tinyloop, editable, with the dev extra minus what only the book and
#     the benchmarks need; reused between runs.  The install (a minute: it
#     compiles the extension) is redone only when what it depends on changed:
#     the requirements, setup.py, pyproject.toml, the extension's sources, or
#     a missing build for that Python.
#
# Run: `.venv/bin/python -m nox` (every session), `nox -s "aio-3.13"` (one),
# `nox -s aio-3.12 -- -k happy` (arguments after -- go to pytest).

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

# The CPython minor versions the asyncio stage promises to run on.
VERSIONS = ("3.11", "3.12", "3.13", "3.14")

# The stage-specific tests, beside tests/conformance (relative to the repository root).
AIO_TESTS = "tests/test_aio_*.py"
# Of those, what no asyncio version changes (see the header): the main run has it.
NOT_PER_VERSION = {"tests/test_aio_changes.py"}

# What the editable install depends on, beside the requirements (globs from the root).
INSTALL_INPUTS = ("setup.py", "pyproject.toml", "tinyloop/uv/*.pyx", "tinyloop/uv/*.pxd",
                  "tinyloop/uv/*.h", "tinyloop/ring/*.pyx", "tinyloop/ring/*.pxd")

# Dev-extra packages the sessions do not need: the book's build, plots, mutation testing.
NOT_NEEDED = {"sphinx", "myst-parser", "furo", "sphinx-design", "sphinx-copybutton",
              "websocket-client", "mutmut", "matplotlib", "pyperf", "nox",
              "cosmic-ray"}

ROOT = Path(__file__).resolve().parent
nox.options.error_on_missing_interpreters = False
if hasattr(nox.options, "download_python"):
    nox.options.download_python = "never"
nox.options.reuse_existing_virtualenvs = True
nox.options.envdir = str(ROOT / ".nox")


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _find(version: str) -> str | None:
    """An executable CPython ``version`` (e.g. "3.12"): on PATH first, then pyenv's versions."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin",
                                                f"python{version}")), reverse=True)
    for candidate in candidates:
        # A pyenv shim is on PATH for every installed version, but runs only the
        # selected ones: ask each candidate what it is.
        if candidate and _version_of(candidate) == version:
            return candidate
    return None


def _pythons() -> list[str]:
    """The versions found, with their directories put first on PATH so nox finds them too."""
    current = "%d.%d" % sys.version_info[:2]
    found = []
    for version in VERSIONS:
        if version == current and not os.environ.get("TINYLOOP_NOX_ALL"):
            print(f"nox: Python {version} skipped: the main pytest run covers it", file=sys.stderr)
            continue
        python = _find(version)
        if python is None:
            print(f"nox: Python {version} not found (PATH, pyenv): skipped", file=sys.stderr)
            continue
        os.environ["PATH"] = os.path.dirname(python) + os.pathsep + os.environ.get("PATH", "")
        found.append(version)
    return found


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = project["project"]["optional-dependencies"]["dev"]
    return [req for req in dev
            if req.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
            not in NOT_NEEDED]


PYTHONS = _pythons()


def _install_stamp(requirements: list[str]) -> str:
    """A digest of what the editable install depends on: requirements and INSTALL_INPUTS."""
    digest = hashlib.sha256("\n".join(requirements).encode())
    for pattern in INSTALL_INPUTS:
        for path in sorted(ROOT.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _install(session: nox.Session) -> None:
    """``pip install -e . <requirements>``, unless nothing it depends on changed since the last."""
    requirements = _requirements()
    stamp = Path(session.virtualenv.location) / "tinyloop-install.stamp"
    wanted = _install_stamp(requirements)
    tag = session.run("python", "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))",
                      silent=True).strip()
    built = (ROOT / "tinyloop" / "uv" / f"_loop{tag}").exists()
    if stamp.exists() and stamp.read_text() == wanted and built:
        session.log("tinyloop and its requirements unchanged since the last install: not reinstalled")
        return
    session.install("-e", ".", *requirements)
    stamp.write_text(wanted)


# With no other Python found, one session without a virtual environment says
# so and skips (nox would otherwise fail with "No sessions found").
@nox.session(name="aio", python=PYTHONS or False)
def aio(session: nox.Session) -> None:
    """The conformance suite, tests/test_aio_*.py and tests/test_uv_loop.py on one Python."""
    if not PYTHONS:
        session.skip("no other CPython >= 3.11 found on PATH or under pyenv: nothing to run")
    _install(session)
    aio_tests = sorted(name for name in (str(path.relative_to(ROOT)) for path in ROOT.glob(AIO_TESTS))
                       if name not in NOT_PER_VERSION)
    # On 2 pytest-xdist workers, as scripts/test.sh runs the main suite.
    pytest = ("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup")
    # Tests marked slow (tornado's own suite on each loop: minutes) run in
    # scripts/test.sh's slow step only, on the main Python (CI runs it);
    # `nox -- -m slow` runs them here (the last -m wins).
    # One run, so the two workers share the whole list.
    session.run(*pytest, "tests/conformance", *aio_tests, "tests/test_uv_loop.py",
                "-m", "not slow", *session.posargs)
