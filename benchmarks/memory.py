# benchmarks/memory.py
"""What does a connection cost in memory?  Server RSS with 0, 1,000 and 10,000 idle connections.

    python benchmarks/memory.py                  aio, uv, asyncio and uvloop at 0, 1000, 10000 (about 3 min)
    python benchmarks/memory.py --quick          0 and 1000 connections, one repetition: plumbing only
    python benchmarks/memory.py --servers uv,uvloop-protocol --counts 0,5000 --repeat 1
    python benchmarks/memory.py --render         rewrite the table from the saved JSON (--reference: the book's)

For each server and each count N, the server is started fresh, answers one
request on a connection of its own (so what the first request allocates,
once, is not counted), and its resident memory is read: the RSS at 0.  Then
the client opens connections up to each N in turn, sends one ``GET /`` on
every one and reads every answer (so each connection is all set up in the
server: its transport, protocol and parser, its buffers), keeps them open
and silent, and reads the server's RSS again once it has settled.  The
bytes a connection costs is the slope of RSS against N (a least-squares
line through the counts), not RSS / N: the interpreter's own memory is in
every point and drops out of the slope.

The rows are the Part III and Part IV stages (``aio``, ``uv``) and the
Protocol peers on stdlib asyncio and uvloop (benchmarks/servers.py), so the
table says what moving the loop to libuv saved per connection, and how that
compares with uvloop.

Writes benchmarks/results/local/memory.json and memory.md (ignored by git);
``--reference`` writes the book's benchmarks/results/memory.json and
memory.md, whose table the chapter includes.  Loopback only; every wait is bounded; every server is stopped
and every socket closed before the next run.
"""

# Rules this file keeps (the main harness's, benchmarks/run.py):
#   * A fresh server per run, stopped in ``finally``; repetitions are
#     interleaved (every server once, then again), and each figure is the
#     median of the repetitions that succeeded.
#   * RSS is the kernel's VmRSS (/proc/PID/status), read with
#     ServerProcess.rss_bytes; the connections come from
#     tinyloop.testing.Crowd, one thread and selectors, in this process.
#   * The descriptor limit is raised for this process and for the server
#     (ServerProcess(nofile=...)), up to the hard limit; a count that does
#     not fit under it is left out, with a note in the table.
#   * The JSON holds every figure the table shows; the table is rendered
#     from the JSON and nothing else.

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make ``benchmarks`` importable

from benchmarks.harness import output  # noqa: E402
from benchmarks.harness.machine import fingerprint  # noqa: E402
from benchmarks import servers  # noqa: E402
from tinyloop import stages  # noqa: E402
from tinyloop.http import HELLO  # noqa: E402
from tinyloop.testing import Crowd, ServerProcess, http_get  # noqa: E402

__all__ = ["COUNTS", "SERVERS", "main", "measure", "render", "slope"]

SCHEMA = 1
SERVERS = ("aio", "uv", "asyncio-protocol", "uvloop-protocol")
COUNTS = (0, 1000, 10_000)
QUICK_COUNTS = (0, 1000)
REPEAT = 3
SETTLE = 0.5        # seconds between the last answer and the RSS reading
TIMEOUT = 60.0      # seconds for each step (start, open, a round of requests)
ROOM = 1024         # descriptors beyond the connections, per process


def slope(points: list[tuple[int, float]]) -> float | None:
    """The least-squares slope of ``points`` (N, bytes): bytes per connection; None for < 2 counts."""
    if len({n for n, _ in points}) < 2:
        return None
    mean_n = statistics.fmean(n for n, _ in points)
    mean_r = statistics.fmean(r for _, r in points)
    return (sum((n - mean_n) * (r - mean_r) for n, r in points)
            / sum((n - mean_n) ** 2 for n, _ in points))


def _server(name: str) -> servers.Server:
    try:
        return servers.stage_server(stages.get(name))
    except KeyError:
        return servers.peer_server(name)


def _raise_nofile(need: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE toward ``need``; return the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def measure(server: servers.Server, counts: list[int]) -> dict[str, Any]:
    """One run: ``{"rss": {N: bytes}, "fds": {N: count}}``, or ``{"error": text}``."""
    process = ServerProcess(server.name, command=list(server.argv), env=server.env,
                            nofile=max(counts) + ROOM, timeout=15.0)
    rss: dict[str, int] = {}
    fds: dict[str, int] = {}
    try:
        process.start()
        status, body = http_get(process.address, timeout=TIMEOUT)
        if (status, body) != (200, HELLO):
            return {"error": f"the warm-up request got {status} {body[:40]!r}"}
        with Crowd(process.address, timeout=TIMEOUT) as crowd:
            for count in counts:
                if count > len(crowd):
                    crowd.open(count - len(crowd))
                    answers = crowd.ask()
                    wrong = sum(answer != (200, HELLO) for answer in answers)
                    if wrong:
                        return {"error": f"{wrong} of {count} connections were not answered"}
                time.sleep(SETTLE)
                rss[str(count)] = process.rss_bytes()
                fds[str(count)] = process.fd_count()
    except (OSError, RuntimeError, TimeoutError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    finally:
        if process.proc is not None:
            process.stop()
    return {"rss": rss, "fds": fds}


def summarize(runs: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    """Medians per count over the runs that succeeded, and the slope through them."""
    good = [run for run in runs if "rss" in run]
    if not good:
        return {"rss": {}, "bytes_per_connection": None,
                "error": runs[-1].get("error") if runs else "not run"}
    medians = {str(n): statistics.median(run["rss"][str(n)] for run in good) for n in counts}
    return {"rss": medians,
            "fds": {str(n): max(run["fds"][str(n)] for run in good) for n in counts},
            "bytes_per_connection": slope([(n, medians[str(n)]) for n in counts]),
            "runs_ok": len(good), "error": None}


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value / 2**20:,.1f}"


def render(data: dict[str, Any]) -> str:
    """The Markdown table (benchmarks/results/memory.md) from the JSON's ``data``."""
    counts = data["counts"]
    lines = []
    if data.get("quick"):
        lines += ["*A `--quick` plumbing run: one repetition, up to "
                  f"{max(counts):,} connections. The book's figures come from the full run "
                  "(`python benchmarks/memory.py`).*", ""]
    lines += [f"Server resident memory (VmRSS, MiB) with N idle keep-alive connections, each "
              f"having served one request; median of {data['repeat']} interleaved run(s), a fresh "
              "server each. Bytes per connection is the least-squares slope of RSS against N.", ""]
    header = ["server", "what it is", *(f"RSS at {n:,}" for n in counts), "bytes per connection"]
    lines += ["| " + " | ".join(header) + " |",
              "| " + " | ".join(["---", "---", *["--:"] * (len(counts) + 1)]) + " |"]
    for row in data["servers"]:
        result = data["results"].get(row["name"], {})
        if row["skipped"] or result.get("error"):
            why = row["skipped"] or result["error"]
            lines.append(f"| `{row['name']}` | {row['summary']} (*not measured: {why}*) | "
                         + " | ".join(["–"] * (len(counts) + 1)) + " |")
            continue
        per = result["bytes_per_connection"]
        cells = [_mib(result["rss"].get(str(n))) for n in counts]
        lines.append(f"| `{row['name']}` | {row['summary']} | " + " | ".join(cells)
                     + f" | {'–' if per is None else f'{per:,.0f}'} |")
    for note in data.get("notes", []):
        lines += ["", f"*{note}*"]
    lines += ["", f"Command: `{data['command']}`; Python {data['machine'].get('python', '?')}, "
              f"{data['machine'].get('cpu_model', '?')}."]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", help=f"comma-separated (default: {','.join(SERVERS)})")
    parser.add_argument("--counts", help=f"comma-separated connection counts (default: "
                                         f"{','.join(map(str, COUNTS))}; 0 is always measured)")
    parser.add_argument("--repeat", type=int, help=f"interleaved repetitions (default {REPEAT})")
    parser.add_argument("--quick", action="store_true",
                        help=f"counts {','.join(map(str, QUICK_COUNTS))}, one repetition: plumbing only")
    output.add_arguments(parser, "memory.json", "--json")  # the Markdown table goes beside it, .md
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the table from the JSON (--out's, or with --reference the book's)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render and args.reference:
        args.out, args.reference = output.RESULTS / "memory.json", False  # re-render the book's table
    args.json = output.json_path(parser, args, "memory.json")
    args.table = args.json.with_suffix(".md")
    if args.render:
        output.write_text(render(json.loads(args.json.read_text(encoding="utf-8"))), args.table)
        print(f"wrote {output.relative(args.table)}")
        return 0
    names = args.servers.split(",") if args.servers else list(SERVERS)
    known = [stage.name for stage in stages.STAGES] + [peer.name for peer in servers.PEERS]
    if unknown := [name for name in names if name not in known]:
        parser.error(f"unknown server(s): {', '.join(unknown)}; known: {', '.join(known)}")
    counts = sorted({0, *(int(n) for n in args.counts.split(","))} if args.counts
                    else set(QUICK_COUNTS if args.quick else COUNTS))
    repeat = args.repeat or (1 if args.quick else REPEAT)
    notes = []
    limit = _raise_nofile(max(counts) + ROOM)
    fitting = [n for n in counts if n + ROOM <= limit]
    if fitting != counts:
        notes.append(f"left out: {', '.join(f'{n:,}' for n in counts if n not in fitting)} connections "
                     f"(the descriptor limit here is {limit:,}; ulimit -Hn raises it)")
        counts = fitting

    rows, plan = [], []
    for name in names:
        server = _server(name)
        note = servers.prepare(server)
        rows.append({"name": name, "kind": server.kind, "summary": server.summary, "skipped": note})
        if note:
            print(f"skip {name}: {note}", flush=True)
        else:
            plan.append(server)
    runs: dict[str, list[dict[str, Any]]] = {server.name: [] for server in plan}
    started = time.monotonic()
    for rep in range(repeat):
        for server in plan:
            record = measure(server, counts)
            runs[server.name].append(record)
            shown = record.get("error") or ", ".join(
                f"{n}: {_mib(record['rss'][str(n)])} MiB" for n in counts)
            print(f"[{rep + 1}/{repeat}] {server.name}: {shown}", flush=True)

    command = "python benchmarks/memory.py" + ("" if argv is None and len(sys.argv) == 1
                                               else " " + " ".join(sys.argv[1:] if argv is None else argv))
    data = {
        "schema": SCHEMA,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": bool(args.quick),
        "command": command,
        "seconds": round(time.monotonic() - started, 1),
        "machine": fingerprint(),
        "counts": counts,
        "repeat": repeat,
        "servers": rows,
        "results": {name: {**summarize(records, counts), "runs": records}
                    for name, records in runs.items()},
        "notes": notes,
    }
    output.write_json(data, args.json)
    output.write_text(render(data), args.table)
    print(render(data))
    print(f"wrote {output.relative(args.json)} and {output.relative(args.table)} in {data['seconds']:.0f} s")
    print(conclusion(data))
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: each server's memory per idle keep-alive connection (the fitted slope)."""
    parts = [f"{name} {row['bytes_per_connection'] / 1024:.1f}" for name, row in data["results"].items()
             if row.get("bytes_per_connection") is not None]
    return ("KiB per idle keep-alive connection: " + ", ".join(parts)) if parts else \
        "memory per connection: nothing measured"


if __name__ == "__main__":
    sys.exit(main())
