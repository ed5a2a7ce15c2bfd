# tests/test_uv_builds.py
#
# Part IV's other two builds, in CI: the debug build, and the release
# build under AddressSanitizer.  The rest of the suite runs on the release
# build in place; here each other build is made in a copy of the tracked
# files (tests/conftest.py, source_copy) and the extension's own tests
# (tests/test_uv_loop.py) and the conformance suite's uv row are run on it,
# in a child Python whose PYTHONPATH is the copy.
#
#     debug   TINYLOOP_UV_DEBUG=1 (setup.py): C assertions on, -O0, and
#             loop.close() raises if a libuv handle it opened is still open
#             or not yet freed, as uvloop's debug build checks its handles.
#     asan    TINYLOOP_UV_CFLAGS="-fsanitize=address -fno-omit-frame-pointer":
#             every read and write of the extension's C code is checked
#             (use after free, overflow).  CPython is not built with it, so
#             the sanitizer's runtime is preloaded (LD_PRELOAD), and its
#             leak check is off: CPython leaves memory to the OS at exit by
#             design, and every such block would be reported.
#
# Rules this file keeps:
#   * Marked slow (a build and two suite runs per build, about two minutes
#     each on 2 cores): scripts/test.sh's full pytest run, which CI runs,
#     includes slow tests; ``-m 'not slow'`` leaves them out.
#   * A build that cannot be made here is skipped with the reason: no
#     libuv, no compiler, or (for asan) a gcc whose -fsanitize=address does
#     not link.  A build that fails to compile where it should is a failure.
#   * The checkout's own build is never touched.

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env, source_copy
from tinyloop import stages

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and gcc: Linux"),
]

BUILD_TIMEOUT = 300.0   # seconds: cythonize and compile at -O0 (about a minute here)
SUITE_TIMEOUT = 240.0   # seconds one child pytest run may take
# The tests each build runs: Part IV's own, and its conformance row.
SUITES = (
    ("tests/test_uv_loop.py",),
    ("tests/conformance", "-k", "uv and not uvloop"),
)


def _needs_libuv() -> None:
    why = stages.get("uv").unavailable()
    if why:
        pytest.skip(f"uv is not built here, so neither are its other builds: {why}")


def build(tree: Path, **env: str) -> None:
    """Build the extension in place in ``tree`` with ``env`` added; fail with the compiler's output."""
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--force", "-q"],
                          cwd=tree, env=child_env(tree, **env), capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
    built = list((tree / "tinyloop" / "uv").glob("_loop*.so"))
    assert done.returncode == 0 and built, (
        f"the build failed ({env}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")


def run_suites(tree: Path, **env: str) -> str:
    """Run SUITES in ``tree``; return their combined output, failing on any failure."""
    outputs = []
    for args in SUITES:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                              cwd=tree, env=child_env(tree, **env), capture_output=True, text=True,
                              timeout=SUITE_TIMEOUT, stdin=subprocess.DEVNULL)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{' '.join(args)} failed on this build ({env}):\n{output[-8000:]}"
        assert re.search(r"\d+ passed", output), output[-2000:]
        outputs.append(output)
    return "\n".join(outputs)


def which_build(tree: Path, **env: str) -> str:
    """The built extension's DEBUG_BUILD flag, as the child imports it ("True"/"False")."""
    done = subprocess.run([sys.executable, "-c",
                           "import tinyloop.uv.loop as loop, tinyloop.uv._loop as ext; "
                           "print(loop.DEBUG_BUILD, ext.__file__)"],
                          cwd=tree, env=child_env(tree, **env), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    flag, _, path = done.stdout.strip().partition(" ")
    assert Path(path).is_relative_to(tree), f"the child imported another build: {path}"
    return flag


@pytest.mark.timeout(BUILD_TIMEOUT + 2 * SUITE_TIMEOUT + 60)
def test_the_debug_build_passes_and_finds_no_live_handle_at_close(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    _needs_libuv()
    tree = source_copy(tmp_path_factory.mktemp("uv-debug"))
    build(tree, TINYLOOP_UV_DEBUG="1")
    assert which_build(tree) == "True", "TINYLOOP_UV_DEBUG=1 must make the debug build"
    output = run_suites(tree)
    # The debug build's close() raises on a live handle; a raise inside a
    # fixture's teardown is an error, so a passing run had none.  Say so
    # plainly if the message shows anyway (e.g. in a __del__, unraisable).
    assert "handle(s) were still open" not in output, output[-8000:]


def _asan_runtime() -> str | None:
    """The path of gcc's AddressSanitizer runtime, if ``-fsanitize=address`` links here."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"tinyloop-asan-probe-{os.getpid()}"
    try:
        linked = subprocess.run([gcc, "-fsanitize=address", "-x", "c", "-", "-o", str(probe)],
                                input="int main(void) { return 0; }\n", capture_output=True,
                                text=True, timeout=60)
        if linked.returncode != 0:
            return None
    finally:
        probe.unlink(missing_ok=True)
    runtime = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    return runtime if os.path.isabs(runtime) and os.path.exists(runtime) else None


@pytest.mark.timeout(BUILD_TIMEOUT + 2 * SUITE_TIMEOUT + 60)
def test_under_address_sanitizer_no_error_is_reported(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    _needs_libuv()
    runtime = _asan_runtime()
    if runtime is None:
        pytest.skip("gcc -fsanitize=address does not link here (no gcc, or no libasan: "
                    "Debian: apt-get install gcc, which brings libasan)")
    flags = "-fsanitize=address -fno-omit-frame-pointer"
    tree = source_copy(tmp_path_factory.mktemp("uv-asan"))
    build(tree, TINYLOOP_UV_CFLAGS=flags)
    extension = next((tree / "tinyloop" / "uv").glob("_loop*.so")).read_bytes()
    assert b"__asan_report" in extension, "the extension was not compiled with -fsanitize=address"
    asan = {"LD_PRELOAD": runtime,
            # halt_on_error: the first error ends the child, whose output we read.
            "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0"}
    assert which_build(tree, **asan) == "False"
    output = run_suites(tree, **asan)
    assert "ERROR: AddressSanitizer" not in output, output[-8000:]
