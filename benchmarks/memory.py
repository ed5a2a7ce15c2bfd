# benchmarks/memory.py
"""What does a connection cost in memory?  Server RSS with 0, 1,000 and 10,000 idle connections.

    python -m benchmarks.memory                  aio, uv, ring, asyncio, uvloop and rloop at 0, 1000, 10000 (about 5 min)
    python -m benchmarks.memory --quick          0 and 1000 connections, one repetition: plumbing only
    python -m benchmarks.memory --servers uv,uvloop-protocol --repeat 1

Per server: a fresh process answers one request on a connection of its own
(what the first request allocates once is not counted), then the client
(tinyloop.testing.Crowd) opens connections up to each N in turn, sends
``GET /`` on each and reads every answer (so each is all set up: transport,
protocol, parser, buffers), keeps them silent, and reads the server's VmRSS
(/proc/PID/status) once it settled.  A connection's bytes are the
least-squares slope of RSS against N, not RSS / N: the interpreter's own
memory is in every point and drops out.  The descriptor limit is raised up
to the hard limit; a count that does not fit is left out with a note.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from benchmarks import servers
from benchmarks.harness import experiment, output, render as table
from benchmarks.harness.process import choose_names, raise_nofile
from benchmarks.harness.summary import median, slope
from tinyloop import stages
from tinyloop.http import HELLO
from tinyloop.testing import Crowd, ServerProcess, http_get

__all__ = ["COUNTS", "SERVERS", "main", "measure", "render"]

SERVERS = ["aio", "uv", "ring", "asyncio-protocol", "uvloop-protocol", "rloop-protocol"]
COUNTS = (0, 1000, 10_000)
QUICK_COUNTS = (0, 1000)
REPEAT = 3
SETTLE = 0.5        # seconds between the last answer and the RSS reading
TIMEOUT = 60.0      # seconds for each step (start, open, a round of requests)
ROOM = 1024         # descriptors beyond the connections, per process


def _error(why: str) -> dict[str, Any]:
    return {"status": "error", "note": why, "error": why}


def measure(server: servers.Server, counts: list[int]) -> dict[str, Any]:
    """One run: ``{"status": "ok", "rss": {N: bytes}, "fds": {N: count}}``, or status "error" and why."""
    process = ServerProcess(server.name, command=list(server.argv), env=server.env,
                            nofile=max(counts) + ROOM, timeout=15.0)
    rss: dict[str, int] = {}
    fds: dict[str, int] = {}
    try:
        process.start()
        status, body = http_get(process.address, timeout=TIMEOUT)
        if (status, body) != (200, HELLO):
            return _error(f"the warm-up request got {status} {body[:40]!r}")
        with Crowd(process.address, timeout=TIMEOUT) as crowd:
            for count in counts:
                if count > len(crowd):
                    crowd.open(count - len(crowd))
                    if wrong := sum(answer != (200, HELLO) for answer in crowd.ask()):
                        return _error(f"{wrong} of {count} connections were not answered")
                time.sleep(SETTLE)
                rss[str(count)], fds[str(count)] = process.rss_bytes(), process.fd_count()
    except (OSError, RuntimeError, TimeoutError) as error:
        return _error(f"{type(error).__name__}: {error}")
    finally:
        if process.proc is not None:
            process.stop()
    return {"status": "ok", "rss": rss, "fds": fds}


def summarize(runs: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    """Medians per count over the runs that succeeded, and the slope through them."""
    good = [run for run in runs if "rss" in run]
    if not good:
        return {"rss": {}, "bytes_per_connection": None, "error": runs[-1].get("error") if runs else "not run"}
    medians = {str(n): median(run["rss"][str(n)] for run in good) for n in counts}
    return {"rss": medians, "fds": {str(n): max(run["fds"][str(n)] for run in good) for n in counts},
            "bytes_per_connection": slope([(n, medians[str(n)]) for n in counts]),
            "runs_ok": len(good), "error": None}


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value / 2**20:,.1f}"


def render(data: dict[str, Any]) -> str:
    """The Markdown table (memory.md) from the JSON's ``data`` alone."""
    counts = data["counts"]
    lines = [*table.quick_caption(data),
             "Server resident memory (VmRSS, MiB) with N idle keep-alive connections, each having served one "
             f"request; median of {data['settings']['repeat']} interleaved run(s), a fresh server each. "
             "Bytes per connection is the least-squares slope of RSS against N.", ""]
    rows = []
    for row in data["servers"]:
        result = data["results"].get(row["name"], {})
        if why := row["skipped"] or result.get("error"):
            rows.append([f"`{row['name']}`", f"{row['summary']} (*not measured: {why}*)",
                         *["–"] * (len(counts) + 1)])
        else:
            per = result["bytes_per_connection"]
            rows.append([f"`{row['name']}`", row["summary"], *(_mib(result["rss"].get(str(n))) for n in counts),
                         "–" if per is None else f"{per:,.0f}"])
    header = ["server", "what it is", *(f"RSS at {n:,}" for n in counts), "bytes per connection"]
    lines += table.markdown(header, rows, numeric_from=2)
    lines += [line for note in data.get("notes", []) for line in ("", f"*{note}*")]
    return "\n".join([*lines, "", table.footer(data)]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: each server's memory per idle keep-alive connection (the fitted slope)."""
    return experiment.sentence("KiB per idle keep-alive connection", [
        f"{name} {row['bytes_per_connection'] / 1024:.1f}" for name, row in data["results"].items()
        if row.get("bytes_per_connection") is not None])


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("memory", __doc__, repeat=REPEAT, pin=False)
    parser.add_argument("--servers", help=f"comma-separated stages and peers (default: {','.join(SERVERS)})")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "memory.json")
    every_stage = [stage.name for stage in stages.STAGES]
    names = choose_names(args.servers, every_stage + [peer.name for peer in servers.PEERS], "server", SERVERS)
    counts = list(QUICK_COUNTS if args.quick else COUNTS)
    repeat = experiment.settings(parser, args, {"repeat": REPEAT}, {"repeat": 1})["repeat"]
    notes = []
    limit = raise_nofile(max(counts) + ROOM)
    if left_out := [n for n in counts if n + ROOM > limit]:
        notes.append(f"left out: {', '.join(f'{n:,}' for n in left_out)} connections "
                     f"(the descriptor limit here is {limit:,}; ulimit -Hn raises it)")
        counts = [n for n in counts if n not in left_out]
    candidates = [servers.stage_server(stages.get(name)) if name in every_stage else servers.peer_server(name)
                  for name in names]
    ready, skipped = experiment.prepared(candidates, servers.prepare)
    clock = experiment.Clock()
    records = experiment.interleave(
        ready, repeat, lambda server: {"server": server.name, **measure(server, counts)},
        lambda server: server.name,
        lambda record: ", ".join(f"{n}: {_mib(record['rss'][str(n)])} MiB" for n in counts))
    runs = {server.name: [r for r in records if r["server"] == server.name] for server in ready}
    settings = {"quick": args.quick, "repeat": repeat, "counts": counts, "settle_s": SETTLE,
                "rss": "VmRSS, /proc/PID/status"}
    data = experiment.document(
        "memory", argv, clock, settings=settings, counts=counts, notes=notes,
        servers=[{"name": s.name, "kind": s.kind, "summary": s.summary, "skipped": skipped.get(s.name)}
                 for s in candidates],
        results={name: {**summarize(own, counts), "runs": own} for name, own in runs.items()})
    return experiment.conclude(data, out, clock, render, conclusion, ".md")


if __name__ == "__main__":
    sys.exit(main())
