# benchmarks/harness/machine.py
"""What the numbers were measured on, and how a command is written down.

Every experiment's JSON carries ``machine`` (``fingerprint()``), the version
lines of the tools its numbers depend on (``version_line``), and its own
command line as a reader would type it (``display``).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.layout import usable_cpus

__all__ = ["ROOT", "display", "fingerprint", "package_version", "version_line"]

# The repository's root: commands are written relative to it.
ROOT = Path(__file__).resolve().parent.parent.parent


def fingerprint() -> dict[str, object]:
    """What the numbers were measured on: CPU, cores, memory (GiB), OS, kernel, Python."""
    model = _proc_line("/proc/cpuinfo", "model name")  # "model name\t: AMD EPYC 7B13"
    kib = _proc_line("/proc/meminfo", "MemTotal")  # "MemTotal:  16384000 kB"
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(usable_cpus()),
        "memory_gib": round(int(kib.split()[0]) / 1024 / 1024, 1) if kib else None,
        "os": platform.platform(),
        "system": platform.system(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def _proc_line(path: str, key: str) -> str | None:
    """What follows ``key``'s colon on the first line of ``path`` that starts with it; None if none."""
    try:
        with open(path) as f:
            return next((line.partition(":")[2].strip() for line in f if line.startswith(key)), None)
    except OSError:
        return None


def version_line(argv: list[str]) -> str | None:
    """The first line ``argv`` prints (e.g. ``["ab", "-V"]``); None if it cannot run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


def package_version(name: str) -> str | None:
    """The installed version of Python package ``name``; None if it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def display(argv: Sequence[str]) -> str:
    """A command as a reader would type it: ``python`` for this interpreter, paths from the repository root."""
    words = ["python" if word == sys.executable else word.replace(f"{ROOT}{os.sep}", "") for word in argv]
    return shlex.join(words)
