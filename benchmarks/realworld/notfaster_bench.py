# benchmarks/realworld/notfaster_bench.py
""""Async Python is not faster", measured: nginx -> a Python app -> PostgreSQL.

    python -m benchmarks.realworld.notfaster_bench --quick      a plumbing run, about two minutes
    python -m benchmarks.realworld.notfaster_bench --reference  the book's run (benchmarks/results/notfaster.*)
    python -m benchmarks.realworld.notfaster_bench --cpus-load 3 --cpus-proxy 2 --cpus-app 0-1 --cpus-db 2
    python -m benchmarks.realworld.notfaster_bench --apps gunicorn-falcon,aiohttp-aio --list
    python -m benchmarks.realworld.notfaster_bench --render     the .md again from the .json

For every configuration of notfaster_apps.APPS it starts the app with N
worker processes, nginx in front of it and one PostgreSQL behind it, and
loads nginx with ``wrk -t1 -c 100 --latency`` on GET /row.  It reports
requests/s, p50 and p99 latency in milliseconds, sorted by p99 as the
article's table is, and beside them the CPU time the server side spent per
request: the app's processes alone, and app + nginx + PostgreSQL.

Writes benchmarks/results/local/notfaster.json and .md; ``--reference`` the
book's benchmarks/results/notfaster.json and .md.  One file holds one entry
per core layout, so a run with another layout adds its table beside the others.
"""

# Rules this file keeps:
#
#   * The worker count is chosen as the article chose it: for each
#     configuration start at one worker and add one until the figure
#     (requests/s, median of the probes) gets worse, bounded by
#     --max-workers (default 2 x the app's cores + 1, gunicorn's rule of
#     thumb).  The chosen count, and every count tried with its figures, is
#     in the JSON and the table.
#   * Then the measurement proper: repetitions interleaved (repetition 1 runs
#     every configuration, then repetition 2...), a fresh app and nginx for
#     every run, warmed up unmeasured first; each figure is the median of
#     the repetitions.  PostgreSQL is started once and shared: it is the
#     "real database" every row talks to.
#   * The core layout is four arguments (taskset(1) lists), so a reader with
#     more cores gives each part its own and runs the same command.  The
#     layout is the key of the results file and is printed above its table.
#   * Nothing hangs and nothing is left behind: every wait is bounded, wrk
#     has --timeout and a wall-clock limit (benchmarks/loads.py), the app is
#     its own process group and is stopped (SIGTERM, then SIGKILL to the
#     whole group) in a ``finally``; nginx and PostgreSQL stop with their
#     ``with`` blocks (services.py).

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from benchmarks import loads
from benchmarks.harness import experiment, output
from benchmarks.harness.machine import ROOT, fingerprint
from benchmarks.harness.process import choose_names
from benchmarks.harness.render import DASH, markdown, number
from benchmarks.harness.summary import NOISE, is_noisy, median
from benchmarks.realworld import services
from benchmarks.realworld.notfaster_apps import APPS, ASYNC_POOL, DSN_ENV, PATH, ROWS_ENV, SYNC_POOL, App

__all__ = ["PARTS", "default_layout", "main", "measure", "render_markdown", "start_app"]

SCHEMA = 1
CONCURRENCY = 100  # wrk's connections, the article's ab -c 100

# Reference and --quick settings: seconds of wrk per run, repetitions, rows.
DEFAULTS = {"duration": 10.0, "probe": 5.0, "warmup": 2.0, "repeat": 3, "rows": 1_000_000}
QUICK = {"duration": 1.0, "probe": 1.0, "warmup": 1.0, "repeat": 1, "rows": 1000, "max_workers": 2}
START_TIMEOUT = 30.0  # seconds an app may take to answer its first GET /row through nginx
STOP_TIMEOUT = 15.0   # seconds an app may take to stop on SIGTERM before SIGKILL
LIBRARIES = ("gunicorn", "falcon", "psycopg", "psycopg-pool", "uvicorn", "starlette",
             "aiohttp", "asyncpg", "uvloop", "httptools")


# --- the core layout ----------------------------------------------------------

PARTS = {"load": "wrk", "proxy": "nginx", "app": "the app's workers", "db": "PostgreSQL"}


def default_layout() -> services.Layout:
    """The load generator on the last quarter of the cores (at least one); everything else shares the rest.

    On 2 cores: wrk on CPU 1; nginx, the app and PostgreSQL on CPU 0.
    """
    # Discussion: the article ran its load generator on another machine and
    # nginx, the app and the database on one 4-vCPU server.  We keep that
    # shape: the load has cores of its own, so it never takes CPU time from
    # what it measures, and the server side shares the rest as a real host
    # would.  On one core there is nothing to separate.
    cpus = services.usable_cpus()
    if len(cpus) < 2:
        return services.Layout(load=None, proxy=None, app=None, db=None)
    k = max(1, len(cpus) // 4)
    load, rest = services.cpu_list(cpus[-k:]), services.cpu_list(cpus[:-k])
    return services.Layout(load=load, proxy=rest, app=rest, db=rest)


# --- one app, started and stopped ------------------------------------------------

def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """One GET; ``(status, body)``. Raises OSError when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@contextlib.contextmanager
def start_app(app: App, workers: int, env: dict[str, str], cpus: str | None,
              log_path: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    """Run ``app`` with ``workers`` processes on a free port; yield ``(process, port)``; stop it at exit.

    The app is its own process group (start_new_session), pinned with
    taskset, its output in ``log_path``.  At exit: SIGTERM to the app's
    first process (gunicorn, uvicorn and our aiohttp launcher each pass it
    on to their workers), up to STOP_TIMEOUT seconds, then SIGKILL to the
    whole group, so no worker outlives a run.
    """
    port = services.free_port()
    argv = [*services.Layout(app=cpus).prefix("app"), *app.command(port, workers)]
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process, port
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # any worker left behind
        process.wait(STOP_TIMEOUT)


def _log_tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_ready(url: str, process: subprocess.Popen, log_path: Path) -> bytes:
    """GET ``url`` until it answers 200, for at most START_TIMEOUT seconds; return the body.

    Raises RuntimeError, with the app's log, when the app exits or never answers.
    """
    deadline = time.monotonic() + START_TIMEOUT
    last = "no answer"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the app exited with status {process.returncode}:\n{_log_tail(log_path)}")
        try:
            status, body = _get(url)
        except OSError as exc:
            last = str(exc)
        else:
            if status == 200:
                return body
            last = f"HTTP {status}"  # nginx's 502 while the app is still starting
        time.sleep(0.1)
    raise RuntimeError(f"no 200 from {url} in {START_TIMEOUT:g} s ({last}):\n{_log_tail(log_path)}")


# --- one run ----------------------------------------------------------------------

def _wrk(url: str, seconds: float, layout: services.Layout, workdir: Path) -> tuple[loads.Measurement, list[str]]:
    settings = loads.Settings(requests={}, duration=seconds, socket_timeout=5.0, run_timeout=seconds + 15)
    measurement, argv, _ = loads.run(loads.get("wrk"), url, settings, workdir, prefix=layout.prefix("load"))
    return measurement, argv


def measure(app: App, workers: int, pg, layout: services.Layout, seconds: float, warmup: float,
            workdir: Path) -> dict:
    """One run: start ``app`` with ``workers`` and nginx, warm up, load for ``seconds``; return its record.

    The record holds wrk's figures (``rps``, ``p50_ms``, ``p99_ms``,
    ``completed``, ``failed``), the CPU seconds spent meanwhile by the app's
    processes, nginx and PostgreSQL (``cpu_app_s``, ``cpu_proxy_s``,
    ``cpu_db_s``), the same per request in microseconds (``app_us_per_req``,
    ``server_us_per_req`` for all three), ``server_cores`` (the three's CPU
    seconds per second of load: 1.0 is one core kept busy), and ``status``: "ok", or
    "failed" with a ``note`` saying how.  Never raises for a failing app.
    """
    record: dict = {"app": app.name, "workers": workers, "status": "failed", "note": None}
    env = {**os.environ, DSN_ENV: pg.dsn, ROWS_ENV: str(pg.rows)}
    log_path = workdir / f"{app.name}.log"
    try:
        with start_app(app, workers, env, layout.app, log_path) as (process, port), \
                services.nginx([port], workers=layout.cores("proxy"), cpus=layout.proxy) as proxy:
            url = f"http://127.0.0.1:{proxy.port}{PATH}"
            body = wait_ready(url, process, log_path)
            record["sample"] = body.decode(errors="replace")
            if warmup > 0:
                _wrk(url, warmup, layout, workdir)  # fills the pools, the caches, nginx's keep-alive set
            before = (services.process_tree_cpu(process.pid), proxy.cpu_seconds(), pg.cpu_seconds())
            result, argv = _wrk(url, seconds, layout, workdir)
            after = (services.process_tree_cpu(process.pid), proxy.cpu_seconds(), pg.cpu_seconds())
            if process.poll() is not None:
                raise RuntimeError(f"the app exited during the run:\n{_log_tail(log_path)}")
    except services.ServiceMissing:
        raise
    except (RuntimeError, OSError) as exc:
        record["note"] = str(exc).strip().splitlines()[0][:300]
        record["log"] = str(exc)[-2000:]
        return record
    record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                  completed=result.completed, failed=result.failed, command=shlex.join(argv))
    cpu = [round(b - a, 3) for a, b in zip(before, after)]
    record.update(cpu_app_s=cpu[0], cpu_proxy_s=cpu[1], cpu_db_s=cpu[2])
    if result.seconds:
        # How many cores the server side kept busy: 1.0 means one core's worth of CPU time.
        record["server_cores"] = sum(cpu) / result.seconds
    if result.completed:
        record["app_us_per_req"] = cpu[0] / result.completed * 1e6
        record["server_us_per_req"] = sum(cpu) / result.completed * 1e6
    if result.error or result.timed_out or not result.completed:
        record["note"] = result.error or "wrk completed no request"
    elif result.failed:
        record["note"] = f"{result.failed} failed requests (socket errors or non-2xx)"
    else:
        record["status"] = "ok"
    return record


# --- the whole run ----------------------------------------------------------------

FIGURES = ("rps", "p50_ms", "p99_ms", "app_us_per_req", "server_us_per_req", "server_cores")


def choose_workers(app: App, pg, layout: services.Layout, settings: dict, workdir: Path,
                   say) -> tuple[int | None, list[dict]]:
    """The article's rule: 1, 2, 3... workers until requests/s falls; returns ``(best count, probes)``.

    Stops at the first count whose requests/s is below the best so far, or
    at ``settings["max_workers"]``.  A failed probe also stops the search.
    Returns None as the count when not even one worker ran.
    """
    probes: list[dict] = []
    best: dict | None = None
    for workers in range(1, settings["max_workers"] + 1):
        record = measure(app, workers, pg, layout, settings["probe"], settings["warmup"], workdir)
        record["phase"] = "search"
        probes.append(record)
        say(f"  search {app.name} x{workers}: {_brief(record)}")
        if record["status"] != "ok":
            break
        if best is not None and record["rps"] < best["rps"]:
            break
        best = record
    return (best["workers"] if best else None), probes


def _brief(record: dict) -> str:
    if record["status"] != "ok":
        return f"{record['status']}: {record['note']}"
    return (f"{record['rps']:.0f} req/s, p50 {record['p50_ms']:.1f} ms, p99 {record['p99_ms']:.1f} ms, "
            f"{record['server_us_per_req']:.0f} us CPU/req")


def summarize(app: App, workers: int | None, runs: list[dict], probes: list[dict]) -> dict:
    """One row of the table: the medians of ``runs`` that succeeded, their spread, and the search."""
    ok = [run for run in runs if run["status"] == "ok"]
    row: dict = {"app": app.name, "server": app.server, "loop": app.loop, "kind": app.kind,
                 "workers": workers, "runs": len(runs), "ok_runs": len(ok),
                 "search": [{"workers": p["workers"], "rps": p.get("rps"), "p99_ms": p.get("p99_ms"),
                             "status": p["status"], "note": p["note"]} for p in probes]}
    for figure in FIGURES:
        row[figure] = median([run.get(figure) for run in ok])
        values = [run[figure] for run in ok if run.get(figure) is not None]
        row.setdefault("spread", {})[figure] = [min(values), max(values)] if values else None
    rps = row["spread"]["rps"]
    # As benchmarks/run.py flags its rows: repetitions more than NOISE apart in req/s.
    row["noisy"] = len(ok) >= 2 and is_noisy(rps)
    failed = [run for run in runs if run["status"] != "ok"]
    row["status"] = "ok" if ok and not failed else ("partial" if ok else "failed")
    notes = sorted({run["note"] for run in [*failed, *probes] if run["status"] != "ok" and run["note"]})
    row["note"] = "; ".join(notes) or None
    return row


def versions(pg, nginx_version: str | None) -> dict[str, str | None]:
    """Every program and library version the figures depend on (None: absent)."""
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10)
    found: dict[str, str | None] = {
        "postgresql": pg.version, "nginx": nginx_version,
        # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer": the words before the notice.
        "wrk": (wrk.stdout or wrk.stderr).partition(" Copyright")[0].strip() or None,
    }
    for library in LIBRARIES:
        try:
            found[library] = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            found[library] = None
    return found


def run(apps: Sequence[App], layout: services.Layout, settings: dict, say=print) -> dict:
    """Search every app's worker count, then measure them all, interleaved; return the layout's entry."""
    runnable = [app for app in apps if app.missing() is None]
    skipped = {app.name: app.missing() for app in apps if app.missing() is not None}
    for name, why in skipped.items():
        say(f"skip {name}: {why}")
    nginx_version = services.nginx_version()  # ServiceMissing before anything starts
    if shutil.which("wrk") is None:
        raise services.ServiceMissing("wrk was not found; install wrk (Debian/Ubuntu: apt-get install wrk; "
                                      "macOS: brew install wrk)")
    # Every async worker opens ASYNC_POOL[1] connections; leave room for all of them at the largest count.
    connections = settings["max_workers"] * max(ASYNC_POOL[1], SYNC_POOL[1]) + 20
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tinyloop-notfaster-") as scratch, \
            services.postgres(layout.db, rows=settings["rows"],
                              settings={"max_connections": str(max(100, connections))}) as pg:
        workdir = Path(scratch)
        say(f"{pg.version} on port {pg.port}, {pg.rows} rows; layout {layout.key}")
        chosen: dict[str, int | None] = {}
        probes: dict[str, list[dict]] = {}
        for app in runnable:
            chosen[app.name], probes[app.name] = choose_workers(app, pg, layout, settings, workdir, say)
        runs: dict[str, list[dict]] = {app.name: [] for app in runnable}
        for rep in range(1, settings["repeat"] + 1):
            for app in runnable:
                if chosen[app.name] is None:
                    continue
                record = measure(app, chosen[app.name], pg, layout, settings["duration"],
                                 settings["warmup"], workdir)
                record.update(phase="measure", rep=rep)
                runs[app.name].append(record)
                say(f"  rep {rep}/{settings['repeat']} {app.name} x{chosen[app.name]}: {_brief(record)}")
        found_versions = versions(pg, nginx_version)
    rows = [summarize(app, chosen[app.name], runs[app.name], probes[app.name]) for app in runnable]
    rows.sort(key=lambda row: (row["p99_ms"] is None, row["p99_ms"] or 0.0))
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "seconds": round(time.monotonic() - started),
        "layout": dict(layout.cpus),
        "settings": {**settings, "concurrency": CONCURRENCY, "sync_pool": SYNC_POOL, "async_pool": ASYNC_POOL},
        "machine": fingerprint(),
        "versions": found_versions,
        "rows": rows,
        "skipped": skipped,
        "runs": [record for app in runnable for record in [*probes[app.name], *runs[app.name]]],
    }


# --- the table ----------------------------------------------------------------------

def _layout_words(layout: dict) -> str:
    return "; ".join(f"{label} on CPU {layout[part]}" if layout[part] else f"{label} unpinned"
                     for part, label in (("load", "wrk"), ("proxy", "nginx"), ("app", "app"), ("db", "PostgreSQL")))


def render_markdown(data: dict) -> str:
    """The committed .md beside the JSON: one table per core layout, sorted by p99, as MyST Markdown."""
    out = ["<!-- generated by python -m benchmarks.realworld.notfaster_bench from notfaster.json; "
           "do not edit -->", ""]
    for key, entry in data["layouts"].items():
        s = entry["settings"]
        mode = "a `--quick` plumbing run, not a measurement" if s.get("quick") else "reference run"
        out += [f"**Layout `{key}`**: {_layout_words(entry['layout'])}. "
                f"{entry['date']}, {mode}: wrk -t1 -c {s['concurrency']}, {s['duration']:g} s per run, "
                f"median of {s['repeat']} interleaved run(s) after the worker search "
                f"({s['probe']:g} s per probe, up to {s['max_workers']} workers); "
                f"{s['rows']:,} rows; pools per worker: sync {s['sync_pool'][1]}, async {s['async_pool'][1]}.", ""]
        rows = []
        for row in entry["rows"]:
            tried = ", ".join(f"{p['workers']}: {number(p['rps'])}" if p["status"] == "ok"
                              else f"{p['workers']}: failed" for p in row["search"])
            flags = ([row["status"]] if row["status"] != "ok" else []) + (["noisy"] if row.get("noisy") else [])
            ratio = row["p99_ms"] / row["p50_ms"] if row["p99_ms"] and row["p50_ms"] else None
            rows.append([row["app"] + (f" ({', '.join(flags)})" if flags else ""), str(row["workers"] or DASH),
                         number(row["rps"]), number(row["p50_ms"], 1), number(row["p99_ms"], 1),
                         number(ratio, 1), number(row["app_us_per_req"]), number(row["server_us_per_req"]),
                         number(row.get("server_cores"), 2), tried])
        out += [*markdown(["configuration", "workers", "req/s", "p50 ms", "p99 ms", "p99/p50", "app CPU µs/req",
                           "app+nginx+PostgreSQL CPU µs/req", "server cores busy", "workers tried (req/s)"], rows), ""]
        notes = [f"{row['app']}: {row['note']}" for row in entry["rows"] if row["note"]]
        notes += [f"{name} skipped: {why}" for name, why in entry["skipped"].items()]
        if any(row.get("noisy") for row in entry["rows"]):
            notes.append(f"noisy: the repetitions' req/s differ by more than {NOISE:.0%}")
        if notes:
            out += ["Notes: " + "; ".join(notes) + ".", ""]
        v, m = entry["versions"], entry["machine"]
        libraries = ", ".join(f"{name} {v[name]}" for name in LIBRARIES if v.get(name))
        out += [f"Versions: {v['postgresql']}; {v['nginx']}; {v['wrk']}; {m['python']}; {libraries}. "
                f"Machine: {m['cpu_model']}, {m['cpus']} CPUs, {m['kernel']}. "
                f"Command: `{entry['command']}` ({entry['seconds']} s).", ""]
    return "\n".join(out)


# --- the command line ---------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    layout = default_layout()
    parser = experiment.parser("realworld.notfaster_bench", __doc__, repeat=DEFAULTS["repeat"], pin=False,
                               results="notfaster.json")
    parser.add_argument("--render", action="store_true", help="only write the .md again from the JSON")
    parser.add_argument("--list", action="store_true", help="list the configurations and whether each can run")
    parser.add_argument("--apps", help="comma list of configurations (default all)")
    services.add_cpu_arguments(parser, PARTS, layout.cpus)
    parser.add_argument("--duration", type=float, help=f"seconds of wrk per measured run ({DEFAULTS['duration']:g})")
    parser.add_argument("--probe", type=float, help=f"seconds of wrk per worker-search probe ({DEFAULTS['probe']:g})")
    parser.add_argument("--rows", type=int, help=f"rows in the table ({DEFAULTS['rows']:,})")
    parser.add_argument("--max-workers", type=int, help="most workers the search tries (2 x app cores + 1)")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "notfaster.json")
    if args.render:
        path = output.write_text(render_markdown(json.loads(out.read_text())), out.with_suffix(".md"))
        print(f"wrote {output.relative(path)}")
        return 0
    known = {app.name: app for app in APPS}
    apps = [known[name] for name in choose_names(args.apps, list(known), "configuration", list(known))]
    if args.list:
        for app in apps:
            print(f"{app.name:28} {app.missing() or 'runs here'}")
        return 0
    layout = services.Layout.from_arguments(args, layout.cpus)
    settings = {**DEFAULTS, "max_workers": 2 * layout.cores("app") + 1, "quick": args.quick}
    if args.quick:
        settings.update(QUICK)
    settings.update({name: getattr(args, name) for name in ("duration", "probe", "repeat", "rows", "max_workers")
                     if getattr(args, name) is not None})
    if layout.load and hasattr(os, "sched_setaffinity"):
        # The harness mostly waits; keep it off the cores it measures, as benchmarks/run.py does.
        os.sched_setaffinity(0, services.cpu_set(layout.load))
    try:
        entry = run(apps, layout, settings)
    except services.ServiceMissing as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 1
    entry["command"] = "python -m benchmarks.realworld.notfaster_bench " + shlex.join(argv)
    data = {"schema": SCHEMA, "layouts": {}}
    if out.exists():  # one file, one entry per layout: keep the others
        with contextlib.suppress(ValueError, KeyError):
            previous = json.loads(out.read_text())
            if previous.get("schema") == SCHEMA:
                data["layouts"].update(previous["layouts"])
    data["layouts"][layout.key] = entry
    experiment.finish(data, out, render_markdown({"layouts": {layout.key: entry}}),
                      conclusion({"layouts": {layout.key: entry}}), extra={out.with_suffix(".md"): render_markdown(data)})
    return 0


def conclusion(data: dict) -> str:
    """The run in one line, per layout: the row with the best p99 and the row with the most req/s."""
    parts = []
    for key, entry in data["layouts"].items():
        rows = [row for row in entry["rows"] if row.get("p99_ms") is not None and row.get("rps") is not None]
        if rows:
            calm = min(rows, key=lambda row: row["p99_ms"])
            fast = max(rows, key=lambda row: row["rps"])
            parts.append(f"{key}: best p99 {calm['app']} ({calm['p99_ms']:.0f} ms, {calm['rps']:.0f} req/s), "
                         f"most req/s {fast['app']} ({fast['rps']:.0f})")
    return "; ".join(parts) if parts else "notfaster: nothing measured"


if __name__ == "__main__":
    sys.exit(main())
