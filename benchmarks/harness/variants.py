# benchmarks/harness/variants.py
"""What the change -> cost experiments (aio_changes, uv_changes) share: each serves a variant from
its own module (``python -m benchmarks.NAME --serve VARIANT --port 0``, under cProfile with
``--profile-to``), times it under the harness's loads, and what acts on one call by pyperf.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks import loads
from benchmarks.harness import output, pyperf_runs
from benchmarks.harness.machine import display

__all__ = ["add_arguments", "pyperf_settings", "run_load", "write_profile"]


def add_arguments(parser: argparse.ArgumentParser, servers: Sequence[str], profile: str, profiled: str,
                  timings: bool = True) -> None:
    """The options every change -> cost experiment takes: ``servers`` are what ``--serve`` may
    run, ``profile`` is ``--profile``'s default (a comma list of them), ``profiled`` says what
    it does (``"... under wrk, by layer, into profile_uv.txt"``); ``timings``: also the
    per-operation pyperf timings' ``--pyperf``, ``--no-micro`` and ``--no-servers``."""
    if timings:
        default = " ".join(pyperf_runs.DEFAULT)
        parser.add_argument("--pyperf", default=default,
                            help=f"pyperf's options for the per-operation timings (default {default!r})")
        parser.add_argument("--no-micro", action="store_true", help="skip the per-operation timings")
        parser.add_argument("--no-servers", action="store_true", help="skip the server runs (per-operation only)")
    parser.add_argument("--profile", nargs="?", const=profile, metavar="SERVERS",
                        help=f"instead: profile these servers {profiled}, beside the JSON (default {profile})")
    parser.add_argument("--serve", choices=list(servers), help="instead: run one server (as the runs do)")
    parser.add_argument("--port", type=int, default=8000, help="--serve's port (default 8000; 0: any free)")
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)  # --serve under cProfile, stats written here


def pyperf_settings(args: argparse.Namespace, pinning: dict) -> tuple[list[str], int | None]:
    """pyperf's options (``--quick``: pyperf_runs.QUICK, else ``--pyperf``'s) and the CPU its
    workers are pinned to (the server's, where the run pins; None: unpinned)."""
    options = list(pyperf_runs.QUICK) if args.quick else args.pyperf.split()
    return options, int(pinning["server_cpus"]) if pinning.get("enabled") else None


def run_load(load: loads.Load, settings: loads.Settings, port: int, pinning: dict) -> int:
    """Run ``load`` once on the server at 127.0.0.1:``port``; the requests it answered.

    Raises RuntimeError if the load failed or a request did (a profile of a failing server
    would say nothing about the design).
    """
    with tempfile.TemporaryDirectory() as workdir:
        result, _, text = loads.run(load, f"http://127.0.0.1:{port}/", settings, Path(workdir),
                                    pinning["load_prefix"])
    if not result.completed or result.failed:
        raise RuntimeError(f"{load.tool} failed: {result.error or text.strip()[-200:]}")
    return result.completed


def write_profile(text: str, name: str, argv: Sequence[str], path: Path) -> int:
    """:func:`output.print_and_write` of the profiles' ``text``, followed by the command (``python -m
    benchmarks.NAME ARGV``) and the load average now; returns 0 (the command's exit status)."""
    command = display(["python", "-m", f"benchmarks.{name}", *argv])
    return output.print_and_write(f"{text}\n{command}\nload average {os.getloadavg()[0]:.2f} at the end\n", path)
