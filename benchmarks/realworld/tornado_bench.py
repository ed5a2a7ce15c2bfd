# benchmarks/realworld/tornado_bench.py
"""The Tornado article's measurement, on every loop: each handler under ab and wrk.

    python -m benchmarks.realworld.tornado_bench                 a full run (see ESTIMATE); --reference: the book's
    python -m benchmarks.realworld.tornado_bench --quick         a plumbing run: tiny loads, once
    python -m benchmarks.realworld.tornado_bench --cpus-server 0 --cpus-load 1 --cpus-db 1
    python -m benchmarks.realworld.tornado_bench --loops aio,uvloop --handlers hello,db
    python -m benchmarks.realworld.tornado_bench --render --reference   the book's table again, from its JSON

Starts PostgreSQL (benchmarks/realworld/services.py) and an upstream HTTP
server once, then, for every repetition, handler, tool and loop in that
order, a fresh benchmarks/realworld/tornado_app.py on that loop: warmed up,
loaded once with ``ab -k -c 100`` or ``wrk -t1 -c 100``, stopped.  Reports
req/s, p50/p99 latency, and CPU time per request of the app, of the
database (the postmaster and all its backends) and of the upstream, each
counted apart.  Writes benchmarks/results/local/tornado.json and its table
beside it; ``--reference`` the book's benchmarks/results/tornado.json and .md.
"""

# Rules this file keeps:
#
#   * Loops alternate: the innermost loop of the schedule is the event
#     loop, so the runs of one handler and tool on asyncio, uvloop, aio and
#     uv sit next to each other in time, and whatever drifts on the machine
#     spreads over all of them.  Figures are medians over the repetitions.
#   * The core layout is arguments (--cpus-server, --cpus-load, --cpus-db,
#     --cpus-upstream, each a taskset list or "none"), and the JSON records
#     it.  The default on two or more cores: the app alone on the first
#     core, everything else (load generator, PostgreSQL, upstream, this
#     harness) on the second.
#   * Nothing is mocked, and what cannot run is a skipped row with its
#     reason: a loop that does not import, PostgreSQL not installed (the
#     database handlers), ab or wrk missing.
#   * The tools, their parsers and their time limits are the harness's own
#     (benchmarks/loads.py); every process started here is stopped in a
#     ``finally`` block.

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import loads, servers
from benchmarks.harness import experiment, output
from benchmarks.harness.process import choose_names
from benchmarks.harness.render import markdown as table, number
from benchmarks.realworld import services
from benchmarks.realworld.tornado_app import HANDLERS, LOOPS, loop_missing, versions
from tinyloop.testing import ServerProcess

TOOLS = ("ab", "wrk")  # the two loads of the article: ab -k -c 100, and wrk
CONCURRENCY = 100
ROWS = 10_000  # rows in items: 100 clients rarely draw the same id
# ab requests per run, per handler: about 2-5 s each on one core.
REQUESTS = {"hello": 5000, "upstream": 2000, "db": 2000, "db-connect": 500}
DEFAULTS = {"duration": 5.0, "repeat": 3, "warmup": 200, "requests": REQUESTS}
QUICK = {"duration": 2.0, "repeat": 1, "warmup": 5,  # wrk takes whole seconds; /db-connect needs 2
         "requests": {name: 2 * CONCURRENCY for name in REQUESTS}}  # ab: at least -c requests
# PostgreSQL's settings for the run.  /db-connect opens one connection per
# request in flight, 100 at once, beside the pool's 10: the default limit of
# 100 would refuse some (the article's "too many connections"), and the row
# would measure refusals instead of connects.
PG_SETTINGS = {"max_connections": "150"}
# From --quick's pace and these sizes: 96 runs (4 loops x 4 handlers x 2 tools x 3).
ESTIMATE = "about 10 minutes on a 2-core machine with four loops"


# --- the core layout -----------------------------------------------------------

PARTS = {"server": "the tornado app", "load": "ab and wrk (and this harness)", "db": "PostgreSQL",
         "upstream": "the upstream HTTP server"}


def default_cpus() -> dict[str, str | None]:
    """With two or more usable cores and taskset: the app on the first, the rest on the second (on a
    2-core machine the app is the part being compared, so it gets a core of its own); else unpinned."""
    cpus = services.usable_cpus()
    first, second = (str(cpus[0]), str(cpus[1])) if len(cpus) >= 2 and shutil.which("taskset") else (None, None)
    return {"server": first, "load": second, "db": second, "upstream": second}


# --- one run ---------------------------------------------------------------------

def warm_up(port: int, path: str, requests: int, timeout: float) -> str | None:
    """GET ``path`` ``requests`` times on one keep-alive connection; None if all were 200, else why not."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        for _ in range(max(requests, 1)):
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                return f"GET {path} answered {response.status} {body[:80]!r}"
    except (OSError, http.client.HTTPException) as error:
        return f"GET {path} failed: {error!r}"
    finally:
        connection.close()
    return None


def app_command(loop: str, layout: services.Layout, dsn: str | None, upstream_port: int) -> list[str]:
    """The command that starts the app on ``loop``, pinned to the server's cores."""
    argv = [*layout.prefix("server"), sys.executable, "-m", "benchmarks.realworld.tornado_app", "--loop", loop, "--port", "0",
            "--rows", str(ROWS), "--upstream", f"http://127.0.0.1:{upstream_port}/"]
    return argv + (["--dsn", dsn] if dsn else [])


def measure(loop: str, handler: str, tool: str, settings: loads.Settings, layout: services.Layout,
            pg: services.PG | None, upstream: ServerProcess, warmup: int, workdir: Path) -> dict:
    """Start the app on ``loop``, warm ``handler`` up, load it once with ``tool``, stop the app.

    Returns the run's record: ``status`` is ``"ok"``, ``"timeout"`` or
    ``"error"`` (``note`` says why); the three ``*_cpu_us_per_req`` figures
    are CPU microseconds per completed request of the app process, of
    PostgreSQL (the postmaster and every backend, reaped ones included) and
    of the upstream server, from /proc before and after the load.
    """
    record: dict = {"loop": loop, "handler": handler, "tool": tool, "status": "error", "note": None,
                    "rps": None, "p50_ms": None, "p99_ms": None, "completed": None, "failed": None,
                    "seconds": None, "app_cpu_us_per_req": None, "db_cpu_us_per_req": None,
                    "upstream_cpu_us_per_req": None}
    load = loads.get("ab-keepalive" if tool == "ab" else "wrk")  # -k -c 100 / -t1 -c 100
    app = ServerProcess(f"tornado-{loop}", command=app_command(loop, layout, pg and pg.dsn, upstream.port),
                        timeout=30)
    try:
        app.start()
    except RuntimeError as error:
        record["note"] = "did not start: " + " | ".join(str(error).strip().splitlines()[-3:])
        return record
    try:
        path = HANDLERS[handler]
        failure = warm_up(app.port, path, warmup, settings.socket_timeout)
        if failure is not None:
            record["note"] = failure
            return record
        parts = {"app": app.pid, "upstream": upstream.pid, **({"db": pg.pid} if pg else {})}
        before = {name: services.process_tree_cpu(pid) for name, pid in parts.items()}
        result, _, output = loads.run(load, f"http://127.0.0.1:{app.port}{path}", settings, workdir,
                                      layout.prefix("load"))
        after = {name: services.process_tree_cpu(pid) for name, pid in parts.items()}
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                      completed=result.completed, failed=result.failed, seconds=result.seconds)
        if result.completed:
            for name in parts:
                record[f"{name}_cpu_us_per_req"] = (after[name] - before[name]) * 1e6 / result.completed
        tail = (output.strip().splitlines()[-1:] or ["no output"])[0]
        exited = app.proc is not None and app.proc.poll() is not None
        record["status"], record["note"] = (
            ("error", f"the app exited with code {app.proc.returncode} during the run") if exited
            else ("timeout", result.error or "no response") if result.timed_out or result.completed == 0
            else ("error", result.error or f"could not read the tool's output: {tail}") if result.completed is None
            else ("ok", f"{result.failed} failed requests" if result.failed else None))
        return record
    finally:
        app.stop()


# --- the whole run ---------------------------------------------------------------

FIGURES = ("rps", "p50_ms", "p99_ms", "app_cpu_us_per_req", "db_cpu_us_per_req", "upstream_cpu_us_per_req")


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (handler, tool, loop), in run order: the harness's fold of its runs.

    Medians of the ``ok`` runs, ``spread`` {figure: [min, max]}, ``noisy`` on
    req/s, ``failed`` summed, ``note`` for the runs that failed.
    """
    folded = experiment.fold(({**run, "case": f"{run['handler']} {run['tool']}"} for run in runs), "case", "loop",
                             FIGURES, deciding=("rps",), ratios=())
    rows = {}
    for run in runs:
        key = (run["handler"], run["tool"], run["loop"])
        if key not in rows:
            summary = folded[f"{run['handler']} {run['tool']}"][run["loop"]]
            rows[key] = {"handler": key[0], "tool": key[1], "loop": key[2],
                         **{name: value for name, value in summary.items() if name != "ratio"}}
    return list(rows.values())


def short_version(name: str, line: str) -> str:
    """A version line as the table shows it: "ab 2.3", "wrk 4.1.0", "PostgreSQL 15.18"."""
    patterns = {"ab": r"Version ([\d.]+)", "wrk": r"wrk (?:\S*/)?([\d.]+)",
                "postgres": r"\(PostgreSQL\) ([\d.]+)", "python": r"(\S+ [\d.]+)"}
    match = re.search(patterns.get(name, r"^(.*)$"), line)
    shown = match.group(1) if match else line
    return {"postgres": f"PostgreSQL {shown}", "python": shown}.get(name, f"{name} {shown}")


def markdown(data: dict) -> str:
    """The results as the Markdown the chapter includes: a header of what ran, then one table."""
    machine, settings = data["machine"], data["settings"]
    cores = ", ".join(f"{part} {cpus or 'unpinned'}" for part, cpus in data["layout"].items())
    runs = "one run each" if settings["repeat"] == 1 else f"medians of {settings['repeat']} interleaved repetitions"
    load = (data.get("load_average") or [machine.get("load_average_1min_at_start")])[0]
    lines = [
        f"Measured {data['date'][:10]} with `{data['command']}` ({runs}; "
        f"ab -k -c {CONCURRENCY}, wrk -t1 -c {CONCURRENCY} for {settings['duration_s']:g} s) "
        f"on {machine['cpu_model']}, {machine['cpus']} cores, {machine['python']}"
        + (f", load average {load:.1f} at the start" if load is not None else "") + f". Cores: {cores}.", "",
        "Versions: " + ", ".join(short_version(name, version) for name, version in data["versions"].items()
                                 if version) + ".", ""]
    if settings.get("quick"):
        lines += ["A `--quick` plumbing run: loads of a few hundred requests, once each. It shows that "
                  "every part runs; its figures are too short to compare loops by.", ""]
    lines += [line for name, reason in data["skipped"].items() for line in (f"Not measured: {name} ({reason}).", "")]
    rows = []
    for row in data["results"]:
        where = [HANDLERS[row["handler"]], row["tool"], row["loop"]]
        if not row["ok_runs"]:
            rows.append([*where, row["note"] or "no run succeeded", *[""] * 5])
            continue
        db = row["db_cpu_us_per_req"] if row["handler"].startswith("db") else None
        up = row["upstream_cpu_us_per_req"] if row["handler"] == "upstream" else None
        rows.append([*where, number(row["rps"], 0) + (" (noisy)" if row["noisy"] else ""), number(row["p50_ms"], 1),
                     number(row["p99_ms"], 1), number(row["app_cpu_us_per_req"], 0), number(db, 0), number(up, 0)])
    lines += table(["handler", "load", "loop", "req/s", "p50 ms", "p99 ms", "app CPU µs/req",
                    "database CPU µs/req", "upstream CPU µs/req"], rows)
    if failed := [row for row in data["results"] if row["failed"]]:
        lines += ["", "Failed requests: " + "; ".join(
            f"{HANDLERS[row['handler']]} {row['tool']} {row['loop']}: {row['failed']}" for row in failed) + "."]
    return "\n".join(lines) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: per handler under wrk (else ab), the loop with the most req/s."""
    parts = []
    for handler in dict.fromkeys(row["handler"] for row in data["results"]):
        rows = [row for row in data["results"] if row["handler"] == handler and row.get("rps")]
        tool = "wrk" if any(row["tool"] == "wrk" for row in rows) else "ab"
        if rows := [row for row in rows if row["tool"] == tool]:
            best = max(rows, key=lambda row: row["rps"])
            parts.append(f"{handler} ({tool}) {best['loop']} {best['rps']:.0f} req/s")
    return ("most req/s per handler: " + ", ".join(parts)) if parts else "tornado: nothing measured"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = experiment.parser("realworld.tornado_bench", __doc__, repeat=DEFAULTS["repeat"], pin=False,
                               results="tornado.json")
    parser.add_argument("--loops", help=f"comma-separated, from {', '.join(LOOPS)} (default: all)")
    parser.add_argument("--handlers", help=f"comma-separated, from {', '.join(HANDLERS)} (default: all)")
    parser.add_argument("--tools", help="ab, wrk or both (default: both)")
    parser.add_argument("--duration", type=float, help="wrk's seconds per run (default 5)")
    services.add_cpu_arguments(parser, PARTS, default_cpus())
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: write the table (.md) again from the JSON (--out's, or --reference's)")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "tornado.json")
    if args.render:
        path = output.write_text(markdown(json.loads(out.read_text(encoding="utf-8"))), out.with_suffix(".md"))
        print(f"wrote {output.relative(path)}")
        return 0
    base = QUICK if args.quick else DEFAULTS
    settings = loads.Settings(requests={"ab-keepalive": 0}, duration=args.duration or base["duration"],
                              socket_timeout=5.0, run_timeout=120.0)
    loops = choose_names(args.loops, list(LOOPS), "loop", list(LOOPS))
    handlers = choose_names(args.handlers, list(HANDLERS), "handler", list(HANDLERS))
    tools = choose_names(args.tools, list(TOOLS), "tool", list(TOOLS))
    if missing := [tool for tool in tools if shutil.which(tool) is None]:
        raise SystemExit(f"tornado_bench: {' and '.join(missing)} not found; install ApacheBench "
                         "(Debian: apache2-utils) and wrk, or run `bash scripts/setup.sh`")
    skipped = {f"loop {loop}": reason for loop in loops if (reason := loop_missing(loop))}
    loops = [loop for loop in loops if f"loop {loop}" not in skipped]
    for name, reason in skipped.items():
        print(f"skip {name}: {reason}", flush=True)
    layout = services.Layout.from_arguments(args, default_cpus())
    # The harness mostly waits: keep it off the app's core, and give the
    # caller (a test, in the same process) its own cores back at the end.
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if layout.load and affinity is not None:
        services.pin(os.getpid(), layout.load)
    try:
        data = execute(args, argv, base, settings, layout, loops, handlers, tools, skipped)
    finally:
        if affinity is not None:
            services.pin(os.getpid(), affinity)
    text = markdown(data)
    experiment.finish(data, out, text, conclusion(data), extra={out.with_suffix(".md"): text})
    return 0


def execute(args: argparse.Namespace, argv: list[str], base: dict, settings: loads.Settings, layout: services.Layout,
            loops: list[str], handlers: list[str], tools: list[str], skipped: dict[str, str]) -> dict:
    """Start PostgreSQL and the upstream, run every measurement in order, stop them; return the JSON."""
    clock, repeat = experiment.Clock(), args.repeat or base["repeat"]
    db_handlers = [h for h in handlers if h.startswith("db")]
    pg: services.PG | None = None
    with contextlib.ExitStack() as stack:  # stops, in reverse order, whatever started
        if db_handlers:
            try:
                pg = stack.enter_context(services.postgres(layout.db, rows=ROWS, settings=PG_SETTINGS))
            except services.ServiceMissing as missing:
                skipped.update({f"handler {handler}": str(missing) for handler in db_handlers})
                handlers = [h for h in handlers if h not in db_handlers]
                print(f"skip {', '.join(db_handlers)}: {missing}", flush=True)
        upstream = stack.enter_context(ServerProcess("epoll", command=[
            *layout.prefix("upstream"), sys.executable, "-m", "tinyloop", "serve", "epoll",
            "--host", "127.0.0.1", "--port", "0"]))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tinyloop-tornado-")))
        cells = [(handler, tool, loop) for handler in handlers for tool in tools for loop in loops]
        print(f"{len(cells) * repeat} runs ({len(loops)} loops x {len(handlers)} handlers x {len(tools)} tools "
              f"x {repeat}); " + ("" if args.quick else ESTIMATE), flush=True)

        def one(cell: tuple[str, str, str]) -> dict:
            handler, tool, loop = cell
            settings.requests["ab-keepalive"] = base["requests"][handler]
            return measure(loop, handler, tool, settings, layout, pg, upstream, base["warmup"], workdir)

        records = experiment.interleave(cells, repeat, one, lambda cell: f"{HANDLERS[cell[0]]:<11} {cell[1]:<3} "
                                        f"{cell[2]:<7}", lambda r: f"{number(r['rps'], 0):>8} req/s app "
                                        f"{number(r['app_cpu_us_per_req'], 0)} µs/req")
    tool_versions = servers.tool_versions()
    data = experiment.document(
        "realworld.tornado_bench", argv, clock, tools={tool: tool_versions[tool] for tool in tools},
        settings={"quick": args.quick, "repeat": repeat, "duration_s": settings.duration,
                  "ab_requests": {h: base["requests"][h] for h in handlers}, "concurrency": CONCURRENCY,
                  "warmup_requests": base["warmup"], "rows": ROWS, "postgres": PG_SETTINGS,
                  "upstream": "tinyloop's epoll stage (python -m tinyloop serve epoll)",
                  "order": "repetition, handler, tool, then loop innermost; a fresh app per run"})
    data.update(versions={"python": data["machine"]["python"], **versions(), "postgres": pg.version if pg else None,
                          **data["tools"]},
                layout={"app": layout.server, "load": layout.load, "database": layout.db, "upstream": layout.upstream},
                skipped=skipped, runs=records, results=summarize(records), elapsed_s=clock.elapsed())
    return data


if __name__ == "__main__":
    sys.exit(main())
