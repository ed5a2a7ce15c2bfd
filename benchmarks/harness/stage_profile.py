"""A stage's own ``serve()`` under cProfile while ab loads it, its time summed by layer.

    text = stage_profile.profile_stage("callbacks", 2000, pinning["server_prefix"])

For the early stages (Parts I and II), whose servers are ``tinyloop.stages``
modules with a ``serve(sock)``: benchmarks/fairness.py writes profile.txt
and benchmarks/stack_cost.py profile_generators.txt with it.  The profiler
counts CPU time (``time.process_time``: a wait in epoll costs nothing) and
runs around ``serve()`` only, after the imports.  Every function has a
layer (LAYERS by source file, built-ins as system calls or "other
built-ins"), by its own time.
"""

from __future__ import annotations

import os
import pstats
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from benchmarks.harness.machine import ROOT
from benchmarks.harness.profiling import SYSCALLS, by_layer
from tinyloop.testing import ServerProcess

__all__ = ["LAYERS", "layer", "profile_stage"]

# Run as ``python -c _PROFILED STAGE OUT``: serve like the CLI does, with the
# profiler on only while serve() runs.
_PROFILED = """\
import cProfile, sys, time
from tinyloop import stages
from tinyloop.serving import announce, listen, stop_on_sigterm
stage, out = sys.argv[1], sys.argv[2]
module = stages.load(stage)
stop_on_sigterm()
sock = listen("127.0.0.1", 0)
announce(stage, sock)
profile = cProfile.Profile(time.process_time)  # CPU time: a wait in epoll costs nothing
profile.enable()
try:
    module.serve(sock)
except KeyboardInterrupt:
    pass
finally:
    profile.disable()
    sock.close()
    profile.dump_stats(out)
"""

# Layers, by source file; built-in functions by what they are.
LAYERS = (
    ("tinyloop/callbacks/loop.py", "reactor: callbacks/loop.py"),
    ("tinyloop/callbacks/server.py", "server callbacks: callbacks/server.py, raw/connection.py"),
    ("tinyloop/raw/connection.py", "server callbacks: callbacks/server.py, raw/connection.py"),
    ("tinyloop/coroutines/tasks.py", "Task and Future: coroutines/tasks.py, futures.py"),
    ("tinyloop/coroutines/futures.py", "Task and Future: coroutines/tasks.py, futures.py"),
    ("tinyloop/coroutines/streams.py", "streams: coroutines/streams.py"),
    ("tinyloop/coroutines/server.py", "handler: coroutines/server.py"),
    ("tinyloop/generators/", "scheduler, traps, handler: tinyloop/generators"),
    ("tinyloop/http/", "HTTP: tinyloop/http"),
    ("/selectors.py", "selectors module"),
)


def layer(function: tuple[str, int, str]) -> str:
    """The layer of ``function`` (a pstats key: file, line, name), by LAYERS."""
    path, _, name = function
    for fragment, label in LAYERS:
        if fragment in path:
            return label
    if path == "~":
        return "system calls" if any(s in name for s in SYSCALLS) else "other built-ins"
    return "other Python"


def profile_stage(stage: str, requests: int, prefix: Sequence[str] = ()) -> str:
    """Profile ``stage``'s server (``prefix`` before its command) under ``ab -k -n REQUESTS -c 10``;
    the summary as text."""
    if shutil.which("ab") is None:
        raise SystemExit("--profile needs ApacheBench (ab)")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, f"{stage}.prof")
        command = [*prefix, sys.executable, "-c", _PROFILED, stage, out]
        with ServerProcess(stage, command=command, env={"PYTHONPATH": str(ROOT)}) as proc:
            ab = ["ab", "-q", "-k", "-n", str(requests), "-c", "10", f"http://127.0.0.1:{proc.port}/"]
            run = subprocess.run(ab, capture_output=True, text=True, timeout=120)
            if run.returncode != 0:
                raise RuntimeError(f"ab failed: {run.stderr.strip()}")
        stats = pstats.Stats(out)
    layers = by_layer(stats, layer)  # layer names every function's layer: own time only
    total = sum(layers.values())
    lines = [f"{stage}: ab -k -n {requests} -c 10, cProfile on serve(); "
             f"{total * 1e3:.0f} ms of CPU time ({total / requests * 1e6:.0f} us per request)", ""]
    lines += [f"  {label:<58} {seconds * 1e3:7.1f} ms  {100 * seconds / total:5.1f} %"
              for label, seconds in layers.most_common()]
    lines += ["", "  the functions with the most time of their own:"]
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:8]  # type: ignore[attr-defined]
    for function, (_, ncalls, tottime, cumtime, _) in top:
        name = pstats.func_std_string(function).replace(str(ROOT) + "/", "")
        lines.append(f"  {ncalls:>7} calls  {tottime * 1e3:6.1f} ms  {name}")
    return "\n".join(lines) + "\n"
