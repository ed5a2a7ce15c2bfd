"""Build a Cython exercise: Part IV's extension, with the student's .pyx file
in place of the reference's.

A Python exercise replaces a module at import time (tinyloop/_override.py).
A Cython file cannot be imported: it must be compiled into the extension
it belongs to (``_loop.pyx`` includes ``tcp.pyx``, ``timers.pyx``...), so
the checker builds that extension in a scratch copy and then replaces the
compiled module instead: TINYLOOP_OVERRIDE=tinyloop.uv._loop=/…/_loop.so
works because importlib loads an extension from any path.

Rules this module keeps:
  * The build is the project's own: the checkout's setup.py, run in a copy
    holding only the package's Cython sources (and the empty __init__.py
    files ``cimport`` needs), so a student's file is compiled with the
    flags and the libuv the reference is.  Nothing in the checkout changes.
  * Builds are cached by content, in build/exercises/ (ignored by git):
    the same sources make the same module, so grading one file twice, or
    the reference in every test run, compiles once.  The most recently
    used KEEP_BUILDS stay; older ones are removed.  A build is written
    beside the cache and renamed into it, so two checks at once cannot see
    half a module.
  * Errors speak of the student's file: Cython's ``FILE:LINE:COL: message``
    for the student's file becomes ``line LINE of your file: message``.
  * Every subprocess has a time limit.
  * For credit (``sandboxed``), the compiler runs in the check's sandbox
    (tinyloop/exercises/sandbox.py), writing only the scratch copy: a
    ``.pyx`` file can make the C compiler read any file it names
    (``cdef extern from "..."``) and print it in its errors.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tinyloop.exercises import markers
from tinyloop.exercises.model import Exercise

__all__ = ["BUILD_TIMEOUT", "Build", "build", "sources"]

# Seconds: Cython and an -O2 compile of _loop.c take about 20 s on one core.
BUILD_TIMEOUT = 240.0
# Errors shown: the first is the one to fix; Cython often stops there anyway.
SHOW_ERRORS = 3
# Builds kept in the cache (about 1.5 MB each), the most recently used.
KEEP_BUILDS = 24


@dataclass
class Build:
    """What :func:`build` made: ``module`` is the compiled extension's file, or
    None when the build failed, and then ``errors`` says why (a few lines)."""

    module: Path | None
    errors: list[str] = field(default_factory=list)
    cached: bool = False


def sources(exercise: Exercise) -> tuple[Path, Path]:
    """``(package, source)``: the directory of ``exercise``'s extension package, and the
    reference ``.pyx`` file the student's file replaces.  Raises ``ModuleNotFoundError``."""
    source = markers.source_path(exercise.module)
    return source.parent, source


def _suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def build(exercise: Exercise, student: Path, root: Path, *, sandboxed: bool = False) -> Build:
    """Build ``exercise.extension`` with the file ``student`` in place of the exercise's
    reference ``.pyx``, using the checkout ``root``'s setup.py; cached by content.
    ``sandboxed``: Cython and the compiler run in a sandbox that can write
    only the build's scratch copy.

    Returns a :class:`Build`.  Raises nothing for a bad file (that is a
    failed Build); ``ModuleNotFoundError`` if the exercise names no source.
    """
    assert exercise.extension, f"exercise {exercise.name} is not a Cython exercise"
    package, source = sources(exercise)
    relative = package.relative_to(root)
    files = {path.name: path.read_bytes() for path in sorted(package.iterdir())
             if path.suffix in (".pyx", ".pxd")}
    files[source.name] = student.read_bytes()
    setup = root / "setup.py"
    digest = hashlib.sha256()
    for name, data in [*sorted(files.items()), ("setup.py", setup.read_bytes()),
                       ("python", sys.version.encode()),
                       ("env", os.environ.get("TINYLOOP_UV_DEBUG", "").encode()
                        + os.environ.get("TINYLOOP_UV_CFLAGS", "").encode())]:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    leaf = exercise.extension.rpartition(".")[2]
    cache = root / "build" / "exercises" / digest.hexdigest()[:24]
    module = cache / f"{leaf}{_suffix()}"
    if module.is_file():
        os.utime(cache)  # recently used: the last to be pruned
        return Build(module, cached=True)

    with tempfile.TemporaryDirectory(prefix="tinyloop-build-") as tmp:
        work = Path(tmp)
        target = work / relative
        target.mkdir(parents=True)
        for part in range(1, len(relative.parts) + 1):  # cimport needs the packages
            (work.joinpath(*relative.parts[:part]) / "__init__.py").touch()
        for name, data in files.items():
            (target / name).write_bytes(data)
        argv, preexec = [sys.executable, str(setup), "-q", "build_ext", "--inplace"], None
        if sandboxed:
            from tinyloop.exercises import sandbox
            flags = {k: os.environ[k] for k in ("TINYLOOP_UV_DEBUG", "TINYLOOP_UV_CFLAGS") if k in os.environ}
            argv, preexec = sandbox.command(argv, env=flags, cwd=str(work), writable=work)
        try:
            result = subprocess.run(argv, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=BUILD_TIMEOUT, preexec_fn=preexec,
                                    start_new_session=sandboxed)
        except subprocess.TimeoutExpired:
            return Build(None, [f"the build did not finish within {BUILD_TIMEOUT:g} s"])
        built = target / f"{leaf}{_suffix()}"
        if result.returncode != 0 or not built.is_file():
            return Build(None, _errors(result.stdout + result.stderr, relative / source.name))
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f".{os.getpid()}-{module.name}"
        shutil.copy2(built, partial)
        os.replace(partial, module)  # atomic: another check sees all of it or nothing
    _prune(cache.parent, keep=cache)
    return Build(module)


def _prune(directory: Path, keep: Path) -> None:
    """Remove all but the KEEP_BUILDS most recently used builds in ``directory``
    (never ``keep``, the one just made).  A build another check is using
    may go: it is only read when its module is loaded, right after."""
    builds = sorted((path for path in directory.iterdir() if path.is_dir() and path != keep),
                    key=lambda path: path.stat().st_mtime, reverse=True)
    for old in builds[KEEP_BUILDS - 1:]:
        shutil.rmtree(old, ignore_errors=True)


# Cython: "tinyloop/uv/tcp.pyx:464:18: undeclared name not builtin: x";
# the C compiler: "tinyloop/uv/_loop.c:123:4: error: ...".
_CYTHON_ERROR = re.compile(r"^(?P<file>\S+\.(?:pyx|pxd|pxi)):(?P<line>\d+):(?P<col>\d+): (?P<text>.+)$")
_C_ERROR = re.compile(r"^\S+\.c:\d+:\d+: (?:fatal )?error: (?P<text>.+)$")


def _errors(output: str, student_source: Path) -> list[str]:
    """The build's errors, in the student's words: their file's line numbers."""
    found = []
    for line in output.splitlines():
        match = _CYTHON_ERROR.match(line.strip())
        if match:
            where = (f"line {match['line']} of your file" if Path(match["file"]) == student_source
                     else f"{match['file']} line {match['line']} (not your file: a name you "
                     "changed?)")
            found.append(f"{where}: {match['text']}")
            continue
        match = _C_ERROR.match(line.strip())
        if match:
            found.append(f"the C compiler: {match['text']}")
    if not found:  # no line we know: the last thing the build said
        tail = [line for line in output.splitlines() if line.strip()]
        found = tail[-1:] or ["the build failed and said nothing"]
    return list(dict.fromkeys(found))[:SHOW_ERRORS]
