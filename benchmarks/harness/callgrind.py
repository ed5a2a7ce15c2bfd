"""Instructions counted by callgrind (valgrind(1)), for instructions.py and trace_cost.py.

A count, unlike a time, does not depend on what else runs on the machine: two
runs may go in parallel.  One operation's count is the difference of two runs,
``n + delta`` and ``n`` operations, over ``delta``: start-up and exit cancel out.
"""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence

from benchmarks.harness.machine import ROOT

__all__ = ["collected", "per_operation"]


def collected(argv: Sequence[str], *, env: dict[str, str] | None = None,
              during: Callable[[subprocess.Popen], None] | None = None, timeout: float = 900) -> int:
    """The instructions callgrind counts in ``argv`` (run from the repository's root, ``env`` its
    environment, default ours).  ``during(process)`` runs while it does, with the process's stdout
    a text pipe (to read a port from, say).  Raises RuntimeError with callgrind's last words when it
    gives no count, subprocess.TimeoutExpired past ``timeout`` seconds (the process killed)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: nothing blocks on a full one
        process = subprocess.Popen(command, stdout=subprocess.PIPE if during else subprocess.DEVNULL,
                                   stderr=errors, stdin=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        try:
            if during is not None:
                during(process)
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        errors.seek(0)
        text = errors.read()
    match = re.search(r"Collected : (\d+)", text)
    if match is None:
        raise RuntimeError(f"no count from callgrind for {' '.join(argv[-4:])}: {text[-800:]}")
    return int(match.group(1))


def per_operation(pool: concurrent.futures.Executor, count: Callable[[int], int], n: int,
                  delta: int) -> Callable[[], float]:
    """Submit ``count(n + delta)`` and ``count(n)`` (instructions for that many operations, e.g. a
    :func:`collected`) to ``pool`` at once; returns what waits for both and gives the instructions
    per operation, their difference over ``delta`` (raising what a run raised)."""
    runs = [pool.submit(count, size) for size in (n + delta, n)]
    return lambda: (runs[0].result() - runs[1].result()) / delta
