# benchmarks/loads.py
"""The loads put on every server, each tool's command, and how to read what it prints.

A tool never hangs the harness: ab's -s and wrk's --timeout, under a wall-clock limit (run).
wrk reports through its Lua done() hook (wrk_json.lua, which pipeline.lua loads too) as one line
of JSON.  ab writes only its percentiles machine-readably (-e's CSV), so the rest of its report
is read from its text.  A figure the output lacks stays None.  Units: requests/s, ms, requests.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.experiment import run_tool

__all__ = ["JSON_SCRIPT", "LOADS", "PIPELINE_SCRIPT", "Load", "Measurement", "Settings", "command", "get",
           "parse_ab", "parse_wrk", "run"]


@dataclass(frozen=True)
class Load:
    """One way of loading a server: ``tool`` ``"ab"`` or ``"wrk"``, ``concurrency`` connections open
    at once, ``keepalive`` or not, ``pipeline`` requests per write (wrk, through PIPELINE_SCRIPT);
    a load not ``default`` runs only when ``--loads`` names it (or says ``all``)."""

    name: str
    tool: str
    concurrency: int
    keepalive: bool
    title: str
    measures: str
    pipeline: int = 1
    default: bool = True


LOADS: tuple[Load, ...] = (
    Load("ab-close", "ab", 10, False,
         "ab -c 10, a new connection per request",
         "accept, one request, close: the cost of a connection (the classic per-stage table)"),
    Load("ab-keepalive", "ab", 100, True,
         "ab -k -c 100, keep-alive",
         "100 open connections, one request in flight on each: the loop's cost per ready socket"),
    Load("wrk", "wrk", 100, True,
         "wrk -t1 -c 100, keep-alive, fixed duration",
         "the same shape for a fixed time, from a faster client, with a latency distribution"),
    # Japronto's shape; not in the default run, so the three classic tables and the run's length
    # stay.  wrk's latency is per batch here: one sample when a batch's last answer arrives.
    Load("wrk-pipeline", "wrk", 100, True,
         "wrk -t1 -c 100 -s pipeline.lua, 24 requests pipelined per write",
         "Japronto's load: a server that answers one read's requests with one write "
         "pays its system calls once per 24 requests", pipeline=24, default=False),
)

PIPELINE_SCRIPT = Path(__file__).resolve().parent / "pipeline.lua"  # DEPTH requests per write
JSON_SCRIPT = Path(__file__).resolve().parent / "wrk_json.lua"  # done(): wrk's figures as JSON
WRK_JSON_MARK = "tinyloop-wrk-json: "  # starts the line wrk_json.lua's done() prints

_BY_NAME = {load.name: load for load in LOADS}


def get(name: str) -> Load:
    """The load called ``name``; raises ``KeyError`` listing the known names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown load {name!r}; known loads: {', '.join(_BY_NAME)}") from None


@dataclass(frozen=True)
class Settings:
    """How big and how patient each load is: ``requests`` {ab load: ``-n``}; in seconds, wrk's
    ``duration``, ``socket_timeout`` on a silent server (ab ``-s``, wrk ``--timeout``) and
    ``run_timeout``, the wall-clock limit on one ab run (wrk's: duration + socket_timeout + 10)."""

    requests: dict[str, int]
    duration: float
    socket_timeout: float
    run_timeout: float


def command(load: Load, url: str, settings: Settings, csv_path: Path | None = None) -> list[str]:
    """The tool's argument list for ``load`` against ``url`` (ending in ``/``).  ab gets ``-r`` (a
    receive error is a failed request, not the end), ``-q`` and ``-e csv_path`` (percentiles in ms)."""
    timeout = f"{settings.socket_timeout:g}"
    if load.tool == "ab":
        return ["ab", "-q", "-r", "-s", timeout, "-n", str(settings.requests[load.name]),
                "-c", str(load.concurrency), *(["-k"] if load.keepalive else []),
                *(["-e", str(csv_path)] if csv_path is not None else []), url]
    argv = ["wrk", "-t1", "-c", str(load.concurrency), "-d", f"{settings.duration:g}s", "--timeout", f"{timeout}s",
            "--latency"]
    if load.pipeline > 1:  # the script's own arguments follow ``--`` (wrk hands them to init())
        return [*argv, "-s", str(PIPELINE_SCRIPT), url, "--", str(load.pipeline)]
    return [*argv, "-s", str(JSON_SCRIPT), url]


@dataclass
class Measurement:
    """What one run of a tool reported: ``completed`` responses, ``failed`` requests (ab: failed +
    non-2xx; wrk: socket errors + non-2xx/3xx), ``rps``, ``p50_ms``/``p99_ms``, ``seconds``;
    ``timed_out`` when the tool or the wall-clock limit gave up, ``error`` the tool's complaint."""

    completed: int | None = None
    failed: int | None = None
    rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    seconds: float | None = None
    timed_out: bool = False
    error: str | None = None


# The lines of ab's report read here ("Complete requests:      2000"), and its complaints when it
# gives up ("apr_pollset_poll: The timeout specified has expired (70007)").
_AB_FIELD = re.compile(r"^(Complete requests|Failed requests|Non-2xx responses|Requests per second"
                       r"|Time taken for tests):\s+([\d.]+)", re.M)
_AB_ERROR = re.compile(r"^(?:.*?\.\.\.)?(apr_\w+(?:\(\))?: .*|ab: .*|Total of \d+ requests completed)$", re.M)


def parse_ab(text: str, csv_text: str | None = None) -> Measurement:
    """Read ab's standard output and its ``-e`` CSV (``"Percentage served,Time in ms"``, then ``P,MS``
    lines), if it wrote one, into a :class:`Measurement`; ``failed`` adds "Non-2xx responses" to
    "Failed requests" (ab counts a 404 as a success)."""
    found = {key: float(value) for key, value in _AB_FIELD.findall(text)}
    result = Measurement(rps=found.get("Requests per second"), seconds=found.get("Time taken for tests"))
    if "Complete requests" in found:
        result.completed = int(found["Complete requests"])
    if "Failed requests" in found or "Non-2xx responses" in found:
        result.failed = int(found.get("Failed requests", 0) + found.get("Non-2xx responses", 0))
    if result.completed and csv_text:  # with nothing completed ab's percentiles are zeros
        percentiles = dict(line.split(",") for line in csv_text.splitlines()[1:] if "," in line)
        result.p50_ms, result.p99_ms = float(percentiles["50"]), float(percentiles["99"])
    if errors := _AB_ERROR.findall(text):
        result.error = "; ".join(errors)
        result.timed_out = any("timeout" in error.lower() for error in errors)
    return result


def parse_wrk(text: str) -> Measurement:
    """Read wrk's output, through wrk_json.lua's JSON line, into a :class:`Measurement` (an empty one
    without the line): ``rps`` over wrk's own run time; percentiles in ms, None when nothing
    completed; ``failed`` every socket error plus the non-2xx/3xx responses."""
    line = next((line for line in text.splitlines() if line.startswith(WRK_JSON_MARK)), None)
    if line is None:
        return Measurement()
    report = json.loads(line[len(WRK_JSON_MARK):])
    completed, seconds, errors = report["requests"], report["duration_us"] / 1e6, report["errors"]
    p50, p99 = (report["latency_us"][p] / 1000 if completed else None for p in ("50", "99"))
    return Measurement(completed=completed, failed=sum(errors.values()), p50_ms=p50, p99_ms=p99, seconds=seconds,
                       rps=completed / seconds if seconds else None,
                       timed_out=errors["timeout"] > 0 and not completed)


def run(load: Load, url: str, settings: Settings, workdir: Path,
        prefix: Sequence[str] = ()) -> tuple[Measurement, list[str], str]:
    """Run ``load`` against ``url`` (``prefix``, e.g. ``taskset -c 1``, before the tool; ab's CSV in
    ``workdir``) under its wall-clock limit; returns ``(measurement, argv, output)``."""
    csv_path = workdir / f"{load.name}-percentiles.csv" if load.tool == "ab" else None
    if csv_path is not None:
        csv_path.unlink(missing_ok=True)
    argv = [*prefix, *command(load, url, settings, csv_path)]
    limit = settings.run_timeout if load.tool == "ab" else settings.duration + settings.socket_timeout + 10
    started = time.monotonic()
    code, output = run_tool(argv, limit)
    elapsed = time.monotonic() - started
    if csv_path is None:
        result = parse_wrk(output)
    else:
        result = parse_ab(output, csv_path.read_text() if csv_path.exists() else None)
        csv_path.unlink(missing_ok=True)
    if load.pipeline > 1:
        # wrk 4.1 records one latency sample per batch, and with so few
        # samples its top percentile can come out as "0.00us": no figure.
        result.p50_ms, result.p99_ms = result.p50_ms or None, result.p99_ms or None
    if result.seconds is None:
        result.seconds = elapsed
    if code is None:  # past the wall-clock limit
        # ab's percentiles after SIGINT index its planned count of requests,
        # not the completed ones: some come out as 0.000.  Keep none of them.
        result.p50_ms = result.p99_ms = None
        result.timed_out = True
        result.error = "; ".join(filter(None, [f"stopped after the {limit:g} s wall-clock limit", result.error]))
    elif code != 0 and result.error is None:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        result.error = f"{argv[len(prefix)]} exited with code {code}: {tail[0]}"
    return result, argv, output
