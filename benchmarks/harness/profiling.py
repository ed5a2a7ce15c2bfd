# benchmarks/harness/profiling.py
"""A loop served by hand (:func:`serve_until_sigterm`), under cProfile if asked (:func:`profiled`),
and its profile summed by layer (:func:`profile_summary`), for aio_changes.py and uv_changes.py.

A profile counts CPU time (``time.process_time``), as the tables' CPU per request does.  A built-in
that enters the kernel is a layer of its own; any other is counted in its callers' layers.
"""

from __future__ import annotations

import asyncio
import collections
import cProfile
import os
import pstats
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks.harness.machine import ROOT
from benchmarks.harness.process import launch, warm_up
from tinyloop.serving import announce, listen
from tinyloop.testing import ServerProcess

__all__ = ["COUNTED", "LAYERS", "SYSCALLS", "by_layer", "count_calls", "layer", "profile_summary", "profiled",
           "serve_until_sigterm"]

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


# Layers by source file, first match wins.
# Built-in functions (pstats' "~" entries) that are one system call each, by fragments of their names.
SYSCALLS = ("'send'", "'recv", "'shutdown'", "'_accept'", "socket.close", "'poll' of 'select.epoll'",
            "'register' of 'select.epoll'", "'modify' of 'select.epoll'",
            "'unregister' of 'select.epoll'", "'setsockopt'", "'setblocking'")
LAYERS = (
    ("/socket.py", "kernel calls: socket methods, epoll"),
    ("tinyloop/http/", "HTTP: tinyloop/http"),
    ("tinyloop/aio/server.py", "the server: HTTPProtocol, handle_stream"),
    ("tinyloop/callbacks/", "the loop: tinyloop/callbacks + tinyloop/aio"),
    ("tinyloop/aio/", "the loop: tinyloop/callbacks + tinyloop/aio"),
    ("asyncio/streams.py", "asyncio's streams: asyncio/streams.py"),
    ("asyncio/base_events.py", "stdlib asyncio's loop"),
    ("asyncio/selector_events.py", "stdlib asyncio's loop"),
    ("asyncio/events.py", "stdlib asyncio's loop"),
    ("asyncio/", "asyncio's tasks and futures (Python parts)"),
    ("/selectors.py", "selectors module"),
)
_KERNEL = (*SYSCALLS, "'sendmsg'", "'getpeername'", "'getsockname'", "'accept'", "'fileno'")

# What a profile counts per request: (label, fragments of pstats' function names).
COUNTED = (
    ("call_soon", ("call_soon)",)),
    ("loop iterations", ("(run_once)", "(_run_once)")),
    ("epoll_ctl", ("'register' of 'select.epoll", "'modify' of 'select.epoll", "'unregister' of 'select.epoll")),
    ("recv", ("'recv' of '_socket",)),
    ("send", ("'send' of '_socket", "'sendmsg' of '_socket")),
)


def layer(function: Function) -> str | None:
    """The layer of ``function`` (a pstats key) by LAYERS; None for a built-in counted with its callers."""
    path, _, name = function
    for fragment, label in LAYERS:
        if fragment in path:
            return label
    if path == "~":
        if any(s in name for s in _KERNEL):
            return "kernel calls: socket methods, epoll"
        if "_asyncio." in name:
            return "asyncio's tasks and futures (C)"
        return None
    return "other Python"


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


def profiled(name: str, argv: tuple[str, ...], pinning: dict, warmup: int,
             load: Callable[[ServerProcess], int]) -> tuple[pstats.Stats, int]:
    """Run the server ``argv`` (which takes ``--profile-to FILE``) under cProfile: ``warmup``
    GET / on one keep-alive connection, then ``load(process)``, which returns the requests
    it had answered.  Returns the stats and the requests served, the warm-up's included.

    Raises RuntimeError when the warm-up fails (and what ``load`` raises).  Without the warm-up,
    aio's recv(2) came out four times dearer than asyncio's (likeliest: glibc's malloc serves a
    256 KiB buffer by mmap(2) until a large block was freed once), not so in the warmed-up tables.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "server.prof")
        process = launch(name, [*argv, "--profile-to", out], prefix=pinning["server_prefix"])
        try:
            failure = warm_up(process.address, warmup, 5.0)
            if failure is not None:
                raise RuntimeError(f"{name}: {failure[1]}")
            requests = load(process)
        finally:
            process.stop()
        stats = pstats.Stats(out)
    return stats, requests + warmup  # the warm-up's requests are in the profile too


def profile_summary(stats: pstats.Stats, served: int, headline: str,
                    counted: tuple[tuple[str, tuple[str, ...]], ...] = COUNTED,
                    layer_of: Callable[[Function], str | None] = layer) -> str:
    """The profile's text: ``headline`` (what ran, under which load), the time by layer
    (``layer_of``, as by_layer) per request of the ``served``, the ``counted`` calls per
    request, and the ten functions with the most time of their own."""
    layers = by_layer(stats, layer_of)
    total = sum(layers.values())
    lines = [f"{headline}, cProfile on the server; {total * 1e3:.0f} ms of CPU time, "
             f"{total / served * 1e6:.0f} us per request",
             "(built-ins are counted in their callers' layers, except the calls into the kernel)", ""]
    lines += [f"  {label:<46} {seconds * 1e3:7.1f} ms  {seconds / served * 1e6:5.1f} us/req  "
              f"{100 * seconds / total:5.1f} %" for label, seconds in layers.most_common() if seconds >= 5e-5]
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
