# tests/test_uv_unbuilt.py
#
# Part IV without its extension: what a machine without libuv or a C
# compiler sees.  The promise is that the pure-Python package still
# works there, that ``import tinyloop.uv`` raises an ImportError saying what
# to install, and that every test of Part IV is skipped with that message
# instead of failing.
#
# Rules this file keeps:
#   * The missing extension is simulated, never made: the tracked files are
#     copied to a temporary directory (tests/conftest.py, source_copy), where
#     no ``_loop*.so`` exists, and a child Python imports tinyloop from the
#     copy.  The checkout's own build is left alone (other tests, and other
#     engineers, use it).
#   * Runs wherever this checkout runs, built or not: it needs no libuv.

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env, source_copy

TIMEOUT = 60.0   # seconds a child may take (pytest in the copy collects the conformance suite)
INSTALL = "libuv1-dev"   # what the message must name on Debian/Ubuntu (tinyloop/uv/loop.py)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = source_copy(tmp_path_factory.mktemp("unbuilt"))
    assert not list((copy / "tinyloop" / "uv").glob("_loop*.so")), "the copy must have no extension"
    return copy


def python(tree: Path, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=tree, env=child_env(tree), text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_the_copy_is_what_the_child_imports(tree: Path) -> None:
    done = python(tree, "-c", "import tinyloop; print(tinyloop.__file__)")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(tree), done.stdout


def test_import_succeeds_and_making_a_loop_says_what_to_install(tree: Path) -> None:
    code = ("import tinyloop.uv\n"
            "try:\n"
            "    tinyloop.uv.new_event_loop()\n"
            "except ImportError as error:\n"
            "    print('ImportError:', error)\n")
    done = python(tree, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ImportError:"), done.stdout + done.stderr
    assert INSTALL in done.stdout, f"the message must say what to install: {done.stdout}"


def test_the_pure_python_stages_still_run(tree: Path) -> None:
    code = ("import tinyloop.aio\n"
            "print(tinyloop.aio.run(__import__('asyncio').sleep(0, 'aio works')))\n"
            "from tinyloop import stages\n"
            "print(stages.get('uv').unavailable() is not None, stages.get('aio').unavailable())\n")
    done = python(tree, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["aio works", "True None"]


def test_serve_uv_exits_2_with_the_message_and_no_traceback(tree: Path) -> None:
    done = python(tree, "-m", "tinyloop", "serve", "uv", "--port", "0", timeout=20)
    assert done.returncode == 2, done.stdout + done.stderr
    assert INSTALL in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""


def test_list_still_names_every_stage(tree: Path) -> None:
    done = python(tree, "-m", "tinyloop", "list")
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("uv ") for line in done.stdout.splitlines())


@pytest.mark.slow  # the uv test files in a child pytest (scripts/test.sh's slow step)
@pytest.mark.timeout(3 * TIMEOUT)
def test_the_uv_tests_skip_with_the_message(tree: Path) -> None:
    """Part IV's rows in the registry-driven suites, and its own tests, skip; nothing fails."""
    done = python(tree, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                  "tests/test_uv_loop.py", "tests/test_servers.py", "tests/conformance/test_running.py",
                  "tests/test_behaviour_registry.py", "-k", "uv and not uvloop or registry",
                  timeout=2 * TIMEOUT)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-4000:]
    assert " passed" in report and " skipped" in report and "failed" not in report, report[-4000:]
    skips = [line for line in report.splitlines() if line.startswith("SKIPPED")]
    # Every skip is Part IV's, with the message, but those every row has
    # on this Python (e.g. "new in 3.12").
    ours = [line for line in skips if "new in 3." not in line]
    assert ours and all(INSTALL in line for line in ours), "\n".join(skips)
