# benchmarks/realworld/notfaster_bench.py
""""Async Python is not faster", measured: nginx -> a Python app -> PostgreSQL.

    python -m benchmarks.realworld.notfaster_bench [--quick] [--reference]
    python -m benchmarks.realworld.notfaster_bench --cpus-load 3 --cpus-proxy 2 --cpus-app 0-1 --cpus-db 2
    python -m benchmarks.realworld.notfaster_bench --apps gunicorn-falcon,aiohttp-aio --list

Every configuration of notfaster_apps.APPS behind nginx, in front of one PostgreSQL, under ``wrk -t1
-c 100 --latency`` on GET /row, at the worker count the article's search picks; one JSON entry and
table per core layout (``--cpus-*``).  chapters/realworld/notfaster.md describes the method.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from mirakuru import HTTPExecutor

from benchmarks import loads
from benchmarks.harness import experiment, output
from benchmarks.harness.layout import Layout, cpu_list, cpu_set, taskset, usable_cpus
from benchmarks.harness.machine import ROOT, package_version, version_line
from benchmarks.harness.process import choose_names
from benchmarks.harness.render import DASH, LOAD_NOTE, markdown, number
from benchmarks.harness.summary import NOISE
from benchmarks.realworld import services
from benchmarks.realworld.notfaster_apps import APPS, ASYNC_POOL, DSN_ENV, PATH, ROWS_ENV, SYNC_POOL, App

CONCURRENCY = 100  # wrk's connections, the article's ab -c 100
DEFAULTS = {"duration": 10.0, "probe": 5.0, "warmup": 2.0, "repeat": 3, "rows": 1_000_000}  # seconds of wrk
QUICK = {"duration": 1.0, "probe": 1.0, "warmup": 1.0, "repeat": 1, "rows": 1000, "max_workers": 2}
START_TIMEOUT = 30.0  # seconds an app may take to answer its first GET /row, and to stop before SIGKILL
FIGURES = ("rps", "p50_ms", "p99_ms", "app_us_per_req", "server_us_per_req", "server_cores")
LIBRARIES = ("gunicorn", "falcon", "psycopg", "psycopg-pool", "uvicorn", "starlette",
             "aiohttp", "asyncpg", "uvloop", "httptools")
PARTS = {"load": "wrk", "proxy": "nginx", "app": "the app's workers", "db": "PostgreSQL"}


def default_layout() -> Layout:
    """wrk on the last quarter of the cores (at least one), everything else on the rest, as the
    article's load generator had a machine of its own; on one core, unpinned."""
    cpus = usable_cpus()
    if len(cpus) < 2:
        return Layout(load=None, proxy=None, app=None, db=None)
    k = max(1, len(cpus) // 4)
    load, rest = cpu_list(cpus[-k:]), cpu_list(cpus[:-k])
    return Layout(load=load, proxy=rest, app=rest, db=rest)


@contextlib.contextmanager
def start_app(app: App, workers: int, pg: services.Service, cpus: str | None,
              log: Path) -> Iterator[HTTPExecutor]:
    """Serve ``app`` with ``workers`` processes on a free port, pinned to ``cpus``, its output in ``log``.

    Yields the running executor (``.process``, ``.port``) once GET /row answers 200; at exit no
    worker survives (services.running).  Raises RuntimeError, with the log, when it exits or never answers.
    """
    port = services.free_port()
    argv = [*taskset(cpus), *app.command(port, workers)]
    with open(log, "ab") as out:
        out.write(f"$ {shlex.join(argv)}\n".encode())
        out.flush()
        executor = HTTPExecutor(argv, f"http://127.0.0.1:{port}{PATH}", status=200, method="GET",
                                request_timeout=2, timeout=START_TIMEOUT, cwd=str(ROOT),
                                envvars={DSN_ENV: pg.dsn, ROWS_ENV: str(pg.rows)},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        with services.running(executor, log, app.name) as running:
            yield running


def _wrk(url: str, seconds: float, layout: Layout, workdir: Path) -> tuple[loads.Measurement, list[str]]:
    settings = loads.Settings(requests={}, duration=seconds, socket_timeout=5.0, run_timeout=seconds + 15)
    measurement, argv, _ = loads.run(loads.get("wrk"), url, settings, workdir, prefix=layout.prefix("load"))
    return measurement, argv


def measure(app: App, workers: int, pg: services.Service, layout: Layout, seconds: float, warmup: float,
            workdir: Path) -> dict:
    """One run: ``app`` with ``workers`` behind a fresh nginx, warmed up, loaded for ``seconds``.

    Returns its record: wrk's figures; the CPU seconds of the app, nginx and PostgreSQL (``cpu_*_s``),
    per request in µs (``app_us_per_req``, ``server_us_per_req`` for all three) and per second
    (``server_cores``); ``status`` "ok", or "failed" with a ``note``.  Never raises for a failing app.
    """
    record: dict = {"app": app.name, "workers": workers, "status": "failed", "note": None}
    log = workdir / f"{app.name}.log"
    try:
        with start_app(app, workers, pg, layout.app, log) as server, \
                services.nginx([server.port], workers=layout.cores("proxy"), cpus=layout.proxy) as proxy:
            url = f"http://127.0.0.1:{proxy.port}{PATH}"
            with urllib.request.urlopen(url, timeout=5) as response:  # through nginx: an HTTPError if not 200
                record["sample"] = response.read().decode(errors="replace")
            _wrk(url, warmup, layout, workdir)  # fills the pools, the caches, nginx's keep-alive set
            pids = (server.process.pid, proxy.pid, pg.pid)
            before = [services.process_tree_cpu(pid) for pid in pids]
            result, argv = _wrk(url, seconds, layout, workdir)
            cpu = [round(services.process_tree_cpu(pid) - was, 3) for pid, was in zip(pids, before)]
            if not server.running():
                raise RuntimeError(f"the app exited during the run:\n{services.tail(log)}")
    except (RuntimeError, OSError) as exc:
        record.update(note=str(exc).strip().splitlines()[0][:300], log=str(exc)[-2000:])
        return record
    record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms, completed=result.completed,
                  failed=result.failed, command=shlex.join(argv),
                  cpu_app_s=cpu[0], cpu_proxy_s=cpu[1], cpu_db_s=cpu[2])
    if result.seconds:
        record["server_cores"] = sum(cpu) / result.seconds  # 1.0: one core's worth of CPU time
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


def choose_workers(app: App, pg: services.Service, layout: Layout, settings: dict,
                   workdir: Path) -> tuple[int | None, list[dict]]:
    """The article's rule: 1, 2, 3... workers until req/s falls below the best so far, a probe fails,
    or ``settings["max_workers"]``; returns ``(best count, or None if none ran, the probes)``."""
    probes: list[dict] = []
    best: dict | None = None
    for workers in range(1, settings["max_workers"] + 1):
        record = measure(app, workers, pg, layout, settings["probe"], settings["warmup"], workdir)
        record["phase"] = "search"
        probes.append(record)
        print(f"  search {app.name} x{workers}: {_brief(record)}", flush=True)
        if record["status"] != "ok" or (best is not None and record["rps"] < best["rps"]):
            break
        best = record
    return (best["workers"] if best else None), probes


def _brief(record: dict) -> str:
    if record["status"] != "ok":
        return f"{record['status']}: {record['note']}"
    return (f"{record['rps']:.0f} req/s, p50 {record['p50_ms']:.1f} ms, p99 {record['p99_ms']:.1f} ms, "
            f"{record['server_us_per_req']:.0f} us CPU/req")


def summarize(app: App, workers: int | None, runs: list[dict], probes: list[dict]) -> dict:
    """One row of the table: the harness's fold of ``runs`` (medians, spread, noisy on req/s), the search."""
    folded = experiment.fold(runs, "app", "app", FIGURES, deciding=("rps",), ratios=())
    row = {"app": app.name, "server": app.server, "loop": app.loop, "kind": app.kind, "workers": workers,
           "runs": len(runs), "ok_runs": 0, **dict.fromkeys(FIGURES),  # no count found: no figures
           **folded.get(app.name, {}).get(app.name, {}),
           "search": [{key: probe.get(key) for key in ("workers", "rps", "p99_ms", "status", "note")}
                      for probe in probes]}
    row.pop("failed", None)
    row.pop("ratio", None)
    failed = [run for run in runs if run["status"] != "ok"]
    row["status"] = "ok" if row["ok_runs"] and not failed else ("partial" if row["ok_runs"] else "failed")
    notes = sorted({run["note"] for run in [*failed, *probes] if run["status"] != "ok" and run["note"]})
    row["note"] = "; ".join(notes) or None
    return row


def calm_order(row: dict) -> tuple[bool, float]:
    """The table's sort key: lowest p99 first, rows without one (failed) last."""
    return row["p99_ms"] is None, row["p99_ms"] or 0.0


def versions(pg: services.Service, nginx_version: str) -> dict[str, str | None]:
    """Every program and library version the figures depend on (None: absent)."""
    wrk = version_line(["wrk", "-v"]) or ""  # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"
    return {"postgresql": pg.version, "nginx": nginx_version,
            "wrk": wrk.partition(" Copyright")[0].strip() or None,
            **{library: package_version(library) for library in LIBRARIES}}


def run(apps: Sequence[App], layout: Layout, settings: dict, argv: Sequence[str] | None) -> dict:
    """Search every app's worker count, then measure them all, interleaved; return the layout's entry.

    One PostgreSQL, started once, serves every row.  Raises ServiceMissing (before anything
    starts) when nginx, PostgreSQL or wrk is not installed.
    """
    runnable, skipped = experiment.prepared(apps, App.missing, "notfaster")
    nginx_version = services.nginx_version()
    if shutil.which("wrk") is None:
        raise services.ServiceMissing("wrk was not found; install wrk (Debian/Ubuntu: apt-get install wrk; "
                                      "macOS: brew install wrk)")
    # Room for every worker's pool at the largest count tried.
    connections = settings["max_workers"] * max(ASYNC_POOL[1], SYNC_POOL[1]) + 20
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-notfaster-") as scratch, \
            services.postgres(layout.db, rows=settings["rows"],
                              settings={"max_connections": str(max(100, connections))}) as pg:
        workdir = Path(scratch)
        print(f"{pg.version} on port {pg.port}, {pg.rows} rows; layout {layout.key}", flush=True)
        searched = {app.name: choose_workers(app, pg, layout, settings, workdir) for app in runnable}
        chosen = [app for app in runnable if searched[app.name][0] is not None]

        def one(app: App) -> dict:
            workers = searched[app.name][0]
            record = measure(app, workers, pg, layout, settings["duration"], settings["warmup"], workdir)
            return {**record, "phase": "measure"}

        records = experiment.interleave(chosen, settings["repeat"], one,
                                        lambda app: f"{app.name} x{searched[app.name][0]}", _brief)
        found_versions = versions(pg, nginx_version)
    runs = {app.name: [record for record in records if record["app"] == app.name] for app in runnable}
    rows = [summarize(app, searched[app.name][0], runs[app.name], searched[app.name][1]) for app in runnable]
    rows.sort(key=calm_order)
    return experiment.document(
        "realworld.notfaster_bench", argv, clock,
        settings={**settings, "concurrency": CONCURRENCY, "sync_pool": SYNC_POOL, "async_pool": ASYNC_POOL},
        seconds=round(clock.elapsed()), layout=dict(layout.cpus), versions=found_versions, rows=rows,
        skipped=skipped,
        runs=[record for app in runnable for record in [*searched[app.name][1], *runs[app.name]]])


def render_markdown(data: dict) -> str:
    """The committed .md beside the JSON: one table per core layout, sorted by p99, as MyST Markdown."""
    out = ["<!-- generated by python -m benchmarks.realworld.notfaster_bench from notfaster.json; "
           "do not edit -->", ""]
    for key, entry in data["layouts"].items():
        s, where = entry["settings"], entry["layout"]
        mode = "a `--quick` plumbing run, not a measurement" if s.get("quick") else "reference run"
        parts = (("load", "wrk"), ("proxy", "nginx"), ("app", "app"), ("db", "PostgreSQL"))
        cores = "; ".join(f"{label} on CPU {where[part]}" if where[part] else f"{label} unpinned"
                          for part, label in parts)
        load = entry.get("load_average")
        load = f", load average {max(load):.1f} ({LOAD_NOTE})" if load else ""
        out += [f"**Layout `{key}`**: {cores}. "
                f"{entry['date']}, {mode}{load}: wrk -t1 -c {s['concurrency']}, {s['duration']:g} s per run, "
                f"median of {s['repeat']} interleaved run(s) after the worker search "
                f"({s['probe']:g} s per probe, up to {s['max_workers']} workers); "
                f"{s['rows']:,} rows; pools per worker: sync {s['sync_pool'][1]}, "
                f"async {s['async_pool'][1]}.", ""]
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
                           "app+nginx+PostgreSQL CPU µs/req", "server cores busy", "workers tried (req/s)"], rows),
                ""]
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


def conclusion(data: dict) -> str:
    """The run in one line, per layout: the row with the best p99 and the row with the most req/s."""
    parts = []
    for key, entry in data["layouts"].items():
        if rows := [row for row in entry["rows"] if None not in (row.get("p99_ms"), row.get("rps"))]:
            calm, fast = min(rows, key=lambda row: row["p99_ms"]), max(rows, key=lambda row: row["rps"])
            parts.append(f"{key}: best p99 {calm['app']} ({calm['p99_ms']:.0f} ms, {calm['rps']:.0f} req/s), "
                         f"most req/s {fast['app']} ({fast['rps']:.0f})")
    return "; ".join(parts) if parts else "notfaster: nothing measured"


def main(argv: list[str] | None = None) -> int:
    defaults = default_layout().cpus
    parser = experiment.parser("realworld.notfaster_bench", __doc__, repeat=DEFAULTS["repeat"], pin=False,
                               results="notfaster.json")
    parser.add_argument("--list", action="store_true", help="list the configurations and whether each can run")
    parser.add_argument("--apps", help="comma list of configurations (default all)")
    parser.add_argument("--max-workers", type=int, help="most workers the search tries (2 x app cores + 1)")
    Layout.add_arguments(parser, PARTS, defaults)
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "notfaster.json")
    known = {app.name: app for app in APPS}
    apps = [known[name] for name in choose_names(args.apps, list(known), "configuration", list(known))]
    if args.list:
        for app in apps:
            print(f"{app.name:28} {app.missing() or 'runs here'}")
        return 0
    layout = Layout.from_arguments(args, defaults)
    settings = {**DEFAULTS, "max_workers": 2 * layout.cores("app") + 1, "quick": args.quick,
                **(QUICK if args.quick else {})}
    settings.update({name: getattr(args, name) for name in ("repeat", "max_workers")
                     if getattr(args, name) is not None})
    if layout.load:
        os.sched_setaffinity(0, cpu_set(layout.load))  # the harness mostly waits: off the cores it measures
    try:
        entry = run(apps, layout, settings, argv)
    except services.ServiceMissing as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 1
    # One file, one entry per layout (the others kept), under the head of the latest run.
    data = {**{key: entry[key] for key in ("schema", "date", "command", "machine", "settings")}, "layouts": {}}
    if out.exists():
        with contextlib.suppress(ValueError, KeyError):
            if (previous := json.loads(out.read_text())).get("schema") == experiment.SCHEMA:
                data["layouts"].update(previous["layouts"])
    data["layouts"][layout.key] = entry
    this = {"layouts": {layout.key: entry}}
    experiment.finish(data, out, render_markdown(this), conclusion(this),
                      extra={out.with_suffix(".md"): render_markdown(data)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
