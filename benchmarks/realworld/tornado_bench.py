# benchmarks/realworld/tornado_bench.py
"""The Tornado article's measurement, on every loop: each handler of tornado_app.py under ab and wrk.

    python -m benchmarks.realworld.tornado_bench [--quick] [--reference]
    python -m benchmarks.realworld.tornado_bench --loops aio,uvloop --handlers hello,db --tools wrk

handlers x tools (``ab -k -c 100``, ``wrk -t1 -c 100``) x loops, the loop innermost; a fresh app per
run, warmed up, loaded once; PostgreSQL and an upstream (tinyloop's epoll stage) started once.  The
CPU per request of the app, of PostgreSQL and of the upstream are counted apart.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import loads
from benchmarks.harness import experiment, output
from benchmarks.harness.layout import Layout, cpu_set, usable_cpus
from benchmarks.harness.machine import package_version, version_line
from benchmarks.harness.process import choose_names, launch, warm_up
from benchmarks.harness.render import markdown as table, number
from benchmarks.realworld import services
from benchmarks.realworld.notfaster_apps import loop_missing
from benchmarks.realworld.tornado_app import HANDLERS, LOOPS

TOOLS = {"ab": ["ab", "-V"], "wrk": ["wrk", "-v"]}  # each tool and its version command
CONCURRENCY = 100
ROWS = 10_000  # rows in items: 100 clients rarely draw the same id
REQUESTS = {"hello": 5000, "upstream": 2000, "db": 2000, "db-connect": 500}  # ab's -n: about 2-5 s each
DEFAULTS = {"duration": 5.0, "repeat": 3, "warmup": 200, "requests": REQUESTS}
QUICK = {"duration": 2.0, "repeat": 1, "warmup": 5,  # wrk takes whole seconds; /db-connect needs 2
         "requests": {name: 2 * CONCURRENCY for name in REQUESTS}}  # ab: at least -c requests
# /db-connect opens a connection per request in flight, 100 at once beside the pool's 10: PostgreSQL's
# default limit of 100 would refuse some, and the row would measure refusals instead of connects.
PG_SETTINGS = {"max_connections": "150"}
FIGURES = ("rps", "p50_ms", "p99_ms", "app_cpu_us_per_req", "db_cpu_us_per_req", "upstream_cpu_us_per_req")
PARTS = {"server": "the tornado app", "load": "ab and wrk (and this harness)", "db": "PostgreSQL",
         "upstream": "the upstream HTTP server"}


def default_cpus() -> dict[str, str | None]:
    """On two cores or more (with taskset): the app on the first, the rest on the second; else unpinned."""
    cpus = usable_cpus()
    first, second = (str(cpus[0]), str(cpus[1])) if len(cpus) >= 2 and shutil.which("taskset") else (None, None)
    return {"server": first, "load": second, "db": second, "upstream": second}


def measure(cell: tuple[str, str, str], base: dict, settings: loads.Settings, layout: Layout,
            pg: services.Service | None, upstream, workdir: Path) -> dict:
    """Start the app on the cell's loop, warm its handler up, load it once with its tool, stop the app.

    Returns the run's record: ``status`` "ok", "timeout" or "error" (``note`` says why), the tool's
    figures and ``*_cpu_us_per_req``, CPU µs per completed request of the app, PostgreSQL, the upstream.
    """
    handler, tool, loop = cell
    record: dict = {"loop": loop, "handler": handler, "tool": tool, "status": "error", "note": None}
    argv = [sys.executable, "-m", "benchmarks.realworld.tornado_app", "--loop", loop, "--port", "0", "--rows",
            str(ROWS), "--upstream", f"http://127.0.0.1:{upstream.port}/", *(["--dsn", pg.dsn] if pg else [])]
    try:
        app = launch(f"tornado-{loop}", argv, prefix=layout.prefix("server"), timeout=30)
    except RuntimeError as error:
        return {**record, "note": "did not start: " + " | ".join(str(error).strip().splitlines()[-3:])}
    try:
        path = HANDLERS[handler]
        if failure := warm_up(("127.0.0.1", app.port), base["warmup"], settings.socket_timeout,
                              path=path, body=None):
            return {**record, "status": failure[0], "note": failure[1]}
        pids = {"app": app.pid, "upstream": upstream.pid, **({"db": pg.pid} if pg else {})}
        before = {name: services.process_tree_cpu(pid) for name, pid in pids.items()}
        settings.requests["ab-keepalive"] = base["requests"][handler]
        load = loads.get("ab-keepalive" if tool == "ab" else "wrk")  # -k -c 100 / -t1 -c 100
        result, _, text = loads.run(load, f"http://127.0.0.1:{app.port}{path}", settings, workdir,
                                    layout.prefix("load"))
        if result.completed:
            record.update({f"{name}_cpu_us_per_req": (services.process_tree_cpu(pid) - before[name]) * 1e6
                           / result.completed for name, pid in pids.items()})
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                      completed=result.completed, failed=result.failed, seconds=result.seconds)
        if app.proc.poll() is not None:
            record["note"] = f"the app exited with code {app.proc.returncode} during the run"
        elif result.timed_out or result.completed == 0:
            record.update(status="timeout", note=result.error or "no response")
        elif result.completed is None:
            tail = (text.strip().splitlines()[-1:] or ["no output"])[0]
            record["note"] = result.error or f"could not read the tool's output: {tail}"
        else:
            record.update(status="ok", note=f"{result.failed} failed requests" if result.failed else None)
        return record
    finally:
        app.stop()


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (handler, tool, loop), in run order: the harness's fold of its runs."""
    cases = ({**run, "case": f"{run['handler']} {run['tool']}"} for run in runs)
    folded = experiment.fold(cases, "case", "loop", FIGURES, deciding=("rps",), ratios=())
    return [{"handler": handler, "tool": tool, "loop": loop,
             **{name: value for name, value in folded[f"{handler} {tool}"][loop].items() if name != "ratio"}}
            for handler, tool, loop in dict.fromkeys((run["handler"], run["tool"], run["loop"]) for run in runs)]


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
    runs = f"medians of {settings['repeat']} interleaved repetitions" if settings["repeat"] > 1 else "one run each"
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
    for name, reason in data["skipped"].items():
        lines += [f"Not measured: {name} ({reason}).", ""]
    rows = []
    for row in data["results"]:
        where = [HANDLERS[row["handler"]], row["tool"], row["loop"]]
        if not row["ok_runs"]:
            rows.append([*where, row["note"] or "no run succeeded", *[""] * 5])
            continue
        db = row["db_cpu_us_per_req"] if row["handler"].startswith("db") else None
        up = row["upstream_cpu_us_per_req"] if row["handler"] == "upstream" else None
        rows.append([*where, number(row["rps"], 0) + (" (noisy)" if row["noisy"] else ""),
                     number(row["p50_ms"], 1), number(row["p99_ms"], 1), number(row["app_cpu_us_per_req"], 0),
                     number(db, 0), number(up, 0)])
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
    return experiment.sentence("most req/s per handler", parts, "tornado: nothing measured")


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("realworld.tornado_bench", __doc__, repeat=DEFAULTS["repeat"], pin=False,
                               results="tornado.json")
    parser.add_argument("--loops", help=f"comma-separated, from {', '.join(LOOPS)} (default: all)")
    parser.add_argument("--handlers", help=f"comma-separated, from {', '.join(HANDLERS)} (default: all)")
    parser.add_argument("--tools", help="ab, wrk or both (default: both)")
    Layout.add_arguments(parser, PARTS, default_cpus())
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "tornado.json")
    base = QUICK if args.quick else DEFAULTS
    repeat = args.repeat or base["repeat"]
    settings = loads.Settings(requests={}, duration=base["duration"], socket_timeout=5.0, run_timeout=120.0)
    loops = choose_names(args.loops, list(LOOPS), "loop", list(LOOPS))
    handlers = choose_names(args.handlers, list(HANDLERS), "handler", list(HANDLERS))
    tools = choose_names(args.tools, list(TOOLS), "tool", list(TOOLS))
    experiment.require("realworld.tornado_bench", *tools)
    loops, skipped = experiment.prepared(loops, loop_missing)
    skipped = {f"loop {loop}": reason for loop, reason in skipped.items()}
    layout = Layout.from_arguments(args, default_cpus())
    clock, pg = experiment.Clock(), None
    with contextlib.ExitStack() as stack:  # stops, in reverse order, whatever started
        if layout.load:  # the harness mostly waits: off the app's core; the caller gets its cores back
            stack.callback(os.sched_setaffinity, 0, os.sched_getaffinity(0))
            os.sched_setaffinity(0, cpu_set(layout.load))
        if db_handlers := [h for h in handlers if h.startswith("db")]:
            try:
                pg = stack.enter_context(services.postgres(layout.db, rows=ROWS, settings=PG_SETTINGS))
            except services.ServiceMissing as missing:
                skipped.update({f"handler {handler}": str(missing) for handler in db_handlers})
                handlers = [h for h in handlers if h not in db_handlers]
                print(f"skip {', '.join(db_handlers)}: {missing}", flush=True)
        upstream = launch("epoll", [sys.executable, "-m", "tinyloop", "serve", "epoll", "--host", "127.0.0.1",
                                    "--port", "0"], prefix=layout.prefix("upstream"))
        stack.callback(upstream.stop)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tinyloop-tornado-")))
        cells = [(handler, tool, loop) for handler in handlers for tool in tools for loop in loops]
        print(f"{len(cells) * repeat} runs ({len(loops)} loops x {len(handlers)} handlers x {len(tools)} tools "
              f"x {repeat})", flush=True)
        records = experiment.interleave(
            cells, repeat, lambda cell: measure(cell, base, settings, layout, pg, upstream, workdir),
            lambda cell: f"{HANDLERS[cell[0]]:<11} {cell[1]:<3} {cell[2]:<7}",
            lambda r: f"{number(r['rps'], 0):>8} req/s app {number(r['app_cpu_us_per_req'], 0)} µs/req")
    data = experiment.document(
        "realworld.tornado_bench", argv, clock, tools={tool: version_line(TOOLS[tool]) for tool in tools},
        settings={"quick": args.quick, "repeat": repeat, "duration_s": settings.duration,
                  "ab_requests": {h: base["requests"][h] for h in handlers}, "concurrency": CONCURRENCY,
                  "warmup_requests": base["warmup"], "rows": ROWS, "postgres": PG_SETTINGS,
                  "upstream": "tinyloop's epoll stage (python -m tinyloop serve epoll)",
                  "order": "repetition, handler, tool, then loop innermost; a fresh app per run"},
        layout={"app": layout.server, "load": layout.load, "database": layout.db, "upstream": layout.upstream},
        skipped=skipped, runs=records, results=summarize(records))
    data["versions"] = {"python": data["machine"]["python"],
                        **{name: package_version(name) for name in ("tornado", "asyncpg", "uvloop")},
                        "postgres": pg.version if pg else None, **data["tools"]}
    return experiment.conclude(data, out, clock, markdown, conclusion, ".md")


if __name__ == "__main__":
    sys.exit(main())
