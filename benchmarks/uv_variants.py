# benchmarks/uv_variants.py
"""tinyloop.uv built from a changed copy of its sources: the variants the experiments price.

    from benchmarks import uv_variants
    uv_variants.use("no-batching")     # before anything imports tinyloop.uv._loop
    import tinyloop.uv                 # now runs the variant's extension

The product ships no benchmark switch: a design an experiment compares
against (VARIANTS) is built here from a copy of tinyloop/uv's sources and
setup.py, changed one way (a patch must apply exactly, ``patch --fuzz=0``, or
the build fails: a variant never silently measures the shipped code).
Builds go to benchmarks/results/local/build/uv/VARIANT/ (ignored by git),
made under the shared build lock and reused while the sources, the patches
and this file are unchanged; using one takes no lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness.output import LOCAL

__all__ = ["BUILD", "VARIANTS", "build", "use", "without_sites"]

ROOT = Path(__file__).resolve().parent.parent
BUILD = LOCAL / "build" / "uv"
PATCHES = Path(__file__).resolve().parent / "uv_patches"
LOCK = "/tmp/tinyloop-uv-build.lock"

# A read of the C flag (``loop._instrumented``, ``self._instrumented``, ...),
# not its assignment in _sync_instrumented; and the check handle's copy of it.
_FLAG_READ = re.compile(r"\b(?:\w+\.)+_instrumented\b(?!\s*=)")
_STATE_READ = re.compile(r"\bstate\.instrumented\b")


def without_sites(source: str) -> str:
    """A .pyx/.pxd source with every test of the instrument flag made the constant false."""
    return _STATE_READ.sub("0", _FLAG_READ.sub("False", source))


def _rewrite(package: Path) -> None:
    for path in package.iterdir():
        if path.suffix in (".pyx", ".pxd"):
            path.write_text(without_sites(path.read_text()))


def _patch(name: str) -> Callable[[Path], None]:
    def apply(package: Path) -> None:
        done = subprocess.run(["patch", "-p1", "--fuzz=0", "--batch", "--no-backup-if-mismatch",
                               "-i", str(PATCHES / f"{name}.patch")],
                              cwd=package.parent.parent, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"benchmarks/uv_patches/{name}.patch no longer applies to tinyloop/uv "
                               f"(update the patch): {(done.stdout + done.stderr)[-800:]}")
    return apply


# Each variant's edit of the copy's tinyloop/uv folder, in place.
VARIANTS: dict[str, Callable[[Path], None]] = {
    "shipped": lambda package: None,                 # unchanged, built by the same compiler as the others
    "no-sites": _rewrite,                            # trace_cost's "no hooks": the compiler drops the hook sites
    "no-batching": _patch("no-batching"),            # uv_changes' uv/no-batching: each write() tried at once
    "timer-per-handle": _patch("timer-per-handle"),  # uvloop's design: a uv_timer_t per call_later
}


def build(variant: str) -> Path:
    """Build ``variant`` of tinyloop.uv._loop (a key of VARIANTS) under BUILD/VARIANT, unless a
    build of the same inputs is there; returns the extension's path.  Raises KeyError for an
    unknown variant, RuntimeError if the patch or the build fails."""
    edit = VARIANTS[variant]
    sources = sorted(path for path in (ROOT / "tinyloop" / "uv").iterdir() if path.suffix in (".pyx", ".pxd"))
    inputs = [*sources, ROOT / "setup.py", Path(__file__).resolve(), *sorted(PATCHES.glob("*.patch"))]
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in inputs)).hexdigest()[:16]
    build_dir = BUILD / variant
    stamp = build_dir / "sources.sha256"
    package = build_dir / "tinyloop" / "uv"
    wanted = package / f"_loop{importlib.machinery.EXTENSION_SUFFIXES[0]}"

    def built() -> bool:
        return wanted.exists() and stamp.exists() and stamp.read_text() == digest

    if built():
        return wanted   # no lock, so a server never waits for somebody else's build
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # flock(1)'s lock: the product's rebuilds wait too
        if built():
            return wanted   # built by another process while we waited
        shutil.rmtree(build_dir, ignore_errors=True)
        package.mkdir(parents=True)
        for folder in (package, package.parent):   # packages, as Cython names the module by them
            (folder / "__init__.py").write_text("")
        shutil.copy(ROOT / "setup.py", build_dir / "setup.py")
        for source in sources:
            shutil.copy(source, package / source.name)
        edit(package)
        done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
                              cwd=build_dir, capture_output=True, text=True)
        if done.returncode or not wanted.exists():
            raise RuntimeError(f"the uv build in {build_dir} failed: {(done.stderr or done.stdout)[-800:]}")
        stamp.write_text(digest)
    return wanted


def use(variant: str) -> Path:
    """Build ``variant`` (see build) and make this process's ``import tinyloop.uv._loop`` load it
    (its folder first on the package's search path); returns its path.

    Raises RuntimeError if tinyloop.uv._loop is imported already (too late to choose).
    """
    if "tinyloop.uv._loop" in sys.modules:
        raise RuntimeError("tinyloop.uv._loop is already imported")
    path = build(variant)
    import tinyloop.uv   # imports no extension (PEP 562): only loop.py does

    tinyloop.uv.__path__.insert(0, str(path.parent))
    return path
