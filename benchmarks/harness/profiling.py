# benchmarks/harness/profiling.py
"""A server under cProfile while a load runs, its time summed by layer: a loop served by hand
(:func:`serve_until_sigterm`, aio_changes and uv_changes) or an early stage's own ``serve()``
(:func:`profile_stage`, fairness and stack_cost).  A profile counts CPU time
(``time.process_time``: a wait in epoll costs nothing), as the tables' CPU per request does.
"""

from __future__ import annotations

import asyncio
import collections
import cProfile
import os
import pstats
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from benchmarks.harness.experiment import require
from benchmarks.harness.machine import ROOT
from benchmarks.harness.process import launch, warm_up
from tinyloop.serving import announce, listen
from tinyloop.testing import ServerProcess

__all__ = ["COUNTED", "LAYERS", "STAGE_LAYERS", "SYSCALLS", "by_layer", "count_calls", "layer", "profile_stage",
           "profile_summary", "profiled", "serve_until_sigterm"]

Function = tuple[str, int, str]  # a pstats key: file, line, name


async def _until_sigterm(main: Coroutine[Any, Any, None]) -> None:
    # Not serving.stop_on_sigterm: its KeyboardInterrupt may land in a transport's connection_lost
    # and leave the Server waiting for ever; a signal handler is a callback like any other.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    try:
        await main
    except asyncio.CancelledError:
        pass


def serve_until_sigterm(name: str, loop: Callable[[], asyncio.AbstractEventLoop],
                        main: Callable[[socket.socket], Coroutine[Any, Any, None]], port: int,
                        profile_to: str | None = None) -> int:
    """Run ``main(listener)`` on a loop from ``loop`` until SIGTERM or Ctrl-C; returns 0.

    ``listener`` listens on 127.0.0.1:``port`` (0: any free port), announced
    under ``name`` (tinyloop.serving.announce).  With ``profile_to`` (a file
    name) the whole run is under cProfile, its stats dumped there on the way out.
    """
    sock = listen("127.0.0.1", port)
    announce(name, sock)
    profile = cProfile.Profile(time.process_time) if profile_to else None
    if profile is not None:
        profile.enable()
    try:
        with asyncio.Runner(loop_factory=loop) as runner:
            runner.run(_until_sigterm(main(sock)))
    except KeyboardInterrupt:
        pass
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(profile_to)
        sock.close()
    return 0


# A profile's layers: (fragment, label) pairs, the first whose fragment is in a function's key
# wins; the key is the source file, or "~:NAME" for a built-in ("~:" then matches every built-in
# left; a None label counts a built-in in its callers' layers); "" ends each table.
# Built-ins that are one system call each, by fragments of their names:
SYSCALLS = ("'send'", "'recv", "'shutdown'", "'_accept'", "socket.close", "'poll' of 'select.epoll'",
            "'register' of 'select.epoll'", "'modify' of 'select.epoll'",
            "'unregister' of 'select.epoll'", "'setsockopt'", "'setblocking'")
_KERNEL = "kernel calls: socket methods, epoll"
_LOOP = "the loop: tinyloop/callbacks + tinyloop/aio"
_STDLIB = "stdlib asyncio's loop"
LAYERS = (  # aio_changes, uv_changes: tinyloop.aio, tinyloop.uv and stdlib asyncio's servers
    ("/socket.py", _KERNEL), ("tinyloop/http/", "HTTP: tinyloop/http"),
    ("tinyloop/aio/server.py", "the server: HTTPProtocol, handle_stream"),
    ("tinyloop/callbacks/", _LOOP), ("tinyloop/aio/", _LOOP),
    ("asyncio/streams.py", "asyncio's streams: asyncio/streams.py"), ("asyncio/base_events.py", _STDLIB),
    ("asyncio/selector_events.py", _STDLIB), ("asyncio/events.py", _STDLIB),
    ("asyncio/", "asyncio's tasks and futures (Python parts)"), ("/selectors.py", "selectors module"),
    *((fragment, _KERNEL) for fragment in (*SYSCALLS, "'sendmsg'", "'getpeername'", "'getsockname'", "'accept'",
                                           "'fileno'")),
    ("_asyncio.", "asyncio's tasks and futures (C)"), ("~:", None), ("", "other Python"),
)
_CALLBACKS = "server callbacks: callbacks/server.py, raw/connection.py"
_TASKS = "Task and Future: coroutines/tasks.py, futures.py"
STAGE_LAYERS = (  # profile_stage: Parts I and II's stages; every built-in has a layer
    ("tinyloop/callbacks/loop.py", "reactor: callbacks/loop.py"), ("tinyloop/callbacks/server.py", _CALLBACKS),
    ("tinyloop/raw/connection.py", _CALLBACKS), ("tinyloop/coroutines/tasks.py", _TASKS),
    ("tinyloop/coroutines/futures.py", _TASKS), ("tinyloop/coroutines/streams.py", "streams: coroutines/streams.py"),
    ("tinyloop/coroutines/server.py", "handler: coroutines/server.py"),
    ("tinyloop/generators/", "scheduler, traps, handler: tinyloop/generators"),
    ("tinyloop/http/", "HTTP: tinyloop/http"), ("/selectors.py", "selectors module"),
    *((fragment, "system calls") for fragment in SYSCALLS), ("~:", "other built-ins"), ("", "other Python"),
)

# What a profile counts per request: (label, fragments of pstats' function names).
COUNTED = (
    ("call_soon", ("call_soon)",)),
    ("loop iterations", ("(run_once)", "(_run_once)")),
    ("epoll_ctl", ("'register' of 'select.epoll", "'modify' of 'select.epoll", "'unregister' of 'select.epoll")),
    ("recv", ("'recv' of '_socket",)),
    ("send", ("'send' of '_socket", "'sendmsg' of '_socket")),
)


def layer(function: Function, table: tuple[tuple[str, str | None], ...] = LAYERS) -> str | None:
    """The layer of ``function`` (a pstats key: file, line, name) by ``table`` (LAYERS, STAGE_LAYERS);
    None for a built-in counted in its callers' layers."""
    path, _, name = function
    key = f"~:{name}" if path == "~" else path
    return next(label for fragment, label in table if fragment in key)


def by_layer(stats: pstats.Stats, layer_of: Callable[[Function], str | None] = layer) -> collections.Counter[str]:
    """Seconds of own time per layer, by ``layer_of`` (a None layer goes to its callers)."""
    layers: collections.Counter[str] = collections.Counter()
    for function, (_, _, tottime, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        label = layer_of(function)
        if label is not None:
            layers[label] += tottime
            continue
        split = 0.0
        for caller, (_, _, caller_tottime, _) in callers.items():
            layers[layer_of(caller) or "other built-ins"] += caller_tottime
            split += caller_tottime
        if tottime > split:  # called from outside the profile's window
            layers["other built-ins"] += tottime - split
    return layers


def count_calls(stats: pstats.Stats, fragments: tuple[str, ...]) -> int:
    """How many calls the profile saw to functions whose pstats name contains one of ``fragments``."""
    return sum(ncalls for function, (_, ncalls, _, _, _) in stats.stats.items()  # type: ignore[attr-defined]
               if any(f in pstats.func_std_string(function) for f in fragments))


def profiled(name: str, argv: Sequence[str], pinning: dict, warmup: int,
             load: Callable[[ServerProcess], int]) -> tuple[pstats.Stats, int]:
    """Run the server ``argv`` (which takes ``--profile-to FILE``; ``pinning["server_prefix"]``
    before it) under cProfile: ``warmup`` GET / on one keep-alive connection (0: none), then
    ``load(process)``, which returns the requests it had answered.  Returns the stats and the
    requests served, the warm-up's included.

    Raises RuntimeError when the warm-up fails (and what ``load`` raises).  Without the warm-up,
    aio's recv(2) came out four times dearer than asyncio's (likeliest: glibc's malloc serves a
    256 KiB buffer by mmap(2) until a large block was freed once), not so in the warmed-up tables.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "server.prof")
        process = launch(name, [*argv, "--profile-to", out], prefix=pinning["server_prefix"],
                         env={"PYTHONPATH": str(ROOT)})
        try:
            failure = warm_up(process.address, warmup, 5.0) if warmup else None
            if failure is not None:
                raise RuntimeError(f"{name}: {failure[1]}")
            requests = load(process)
        finally:
            process.stop()
        stats = pstats.Stats(out)
    return stats, requests + warmup  # the warm-up's requests are in the profile too


_NOTE = "(built-ins are counted in their callers' layers, except the calls into the kernel)"


def profile_summary(stats: pstats.Stats, served: int, headline: str,
                    counted: tuple[tuple[str, tuple[str, ...]], ...] = COUNTED,
                    layer_of: Callable[[Function], str | None] = layer, note: str | None = _NOTE) -> str:
    """The profile's text: ``headline`` (what ran, under which load), ``note``, the time by layer
    (``layer_of``, as by_layer) per request of the ``served``, the ``counted`` calls per
    request, and the ten functions with the most time of their own."""
    layers = by_layer(stats, layer_of)
    total = sum(layers.values())
    lines = [f"{headline}, cProfile on the server; {total * 1e3:.0f} ms of CPU time, "
             f"{total / served * 1e6:.0f} us per request", *([note] if note else []), ""]
    width = max([46, *map(len, layers)])
    lines += [f"  {label:<{width}} {seconds * 1e3:7.1f} ms  {seconds / served * 1e6:5.1f} us/req  "
              f"{100 * seconds / total:5.1f} %" for label, seconds in layers.most_common() if seconds >= 5e-5]
    if counted:
        lines += ["", "  calls per request: " + ", ".join(
            f"{label} {count_calls(stats, names) / served:.2f}" for label, names in counted)]
    lines += ["", "  the functions with the most time of their own:"]
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:10]  # type: ignore[attr-defined]
    for function, (_, ncalls, tottime, _, _) in top:
        label = pstats.func_std_string(function).replace(str(ROOT) + "/", "")
        for root in ("asyncio/", "selectors.py"):
            label = label[label.find(root):] if f"/{root}" in label else label
        lines.append(f"  {ncalls:>7} calls  {tottime * 1e3:6.1f} ms  {label}")
    return "\n".join(lines) + "\n"


# Run as ``python -c _PROFILED STAGE --profile-to OUT``: serve as the CLI does, the profiler on
# only while serve() runs (after the imports).
_PROFILED = """\
import cProfile, sys, time
from tinyloop import stages
from tinyloop.serving import announce, listen, stop_on_sigterm
stage, out = sys.argv[1], sys.argv[3]
module = stages.load(stage)
stop_on_sigterm()
sock = listen("127.0.0.1", 0)
announce(stage, sock)
profile = cProfile.Profile(time.process_time)
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


def profile_stage(stage: str, requests: int, prefix: Sequence[str] = ()) -> str:
    """An early stage's own ``serve()`` (a tinyloop.stages module, Parts I and II) under cProfile
    while ``ab -k -n REQUESTS -c 10`` loads it (``prefix``, e.g. taskset, before its command); the
    :func:`profile_summary` by STAGE_LAYERS.  Exits (SystemExit) without ab; RuntimeError if ab fails."""
    require("--profile", "ab")

    def load(process: ServerProcess) -> int:
        ab = ["ab", "-q", "-k", "-n", str(requests), "-c", "10", f"http://127.0.0.1:{process.port}/"]
        run = subprocess.run(ab, capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise RuntimeError(f"ab failed: {run.stderr.strip()}")
        return requests

    stats, served = profiled(stage, [sys.executable, "-c", _PROFILED, stage], {"server_prefix": prefix}, 0, load)
    return profile_summary(stats, served, f"{stage}: ab -k -n {requests} -c 10, serve() only", counted=(),
                           layer_of=lambda function: layer(function, STAGE_LAYERS), note=None)
