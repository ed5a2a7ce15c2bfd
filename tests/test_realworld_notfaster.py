"""The plumbing of "Async Python is not faster" (benchmarks/realworld/notfaster_*.py), on a tiny run.

PostgreSQL and nginx really start (services.py), a request goes nginx ->
app -> PostgreSQL and back as JSON, for a sync configuration (gunicorn +
Falcon + psycopg_pool) and async ones (uvicorn + Starlette and aiohttp,
with asyncpg, on tinyloop.aio), and everything stops, every worker
included.  A missing binary skips with ServiceMissing's message, a missing
library with the configuration's own.  These check behaviour, never speed:
the one benchmark run here lasts a second per step and its figures are only
checked to be there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from benchmarks.harness.layout import cpu_list, cpu_set, usable_cpus
from benchmarks.harness.machine import ROOT
from benchmarks.realworld import notfaster_apps, notfaster_bench, services
from benchmarks.realworld.notfaster_apps import APPS, PATH

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("postgres-notfaster")]  # pytest-timeout: a stack that hangs fails the test

ROWS = 50
BY_NAME = {app.name: app for app in APPS}


def _start(manager):
    """Enter a service's context manager, or skip with ServiceMissing's message."""
    try:
        return manager.__enter__()
    except services.ServiceMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def pg() -> Iterator[services.Service]:
    manager = services.postgres(rows=ROWS)
    pg = _start(manager)
    try:
        yield pg
    finally:
        manager.__exit__(None, None, None)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    members = []
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
    return members


@pytest.mark.parametrize("name", ["gunicorn-falcon", "uvicorn-starlette-aio", "aiohttp-aio"])
def test_a_request_goes_through_nginx_and_the_app_to_postgres_and_back(
        name: str, pg: services.Service, tmp_path: Path) -> None:
    app = BY_NAME[name]
    if app.missing():
        pytest.skip(app.missing())
    with notfaster_bench.start_app(app, 2, pg, None, tmp_path / "app.log") as server:
        manager = services.nginx([server.port])
        proxy = _start(manager)
        try:
            url = f"http://127.0.0.1:{proxy.port}{PATH}"
            bodies = []
            for _ in range(5):
                with urllib.request.urlopen(url, timeout=10) as response:
                    bodies.append(response.read())
            pgid = server.process.pid
            workers = psutil.Process(pgid).children(recursive=True)
        finally:
            manager.__exit__(None, None, None)
    for body in bodies:
        row = json.loads(body)
        assert set(row) == {"id", "value"}, f"{name} should answer the row as JSON, got {body!r}"
        assert 1 <= row["id"] <= ROWS and row["value"] == f"value {row['id']}", (
            f"{name} should return the row PostgreSQL holds for its key, got {row}")
    assert workers, f"{name} was started with 2 workers but had no child process"
    assert not psutil.pid_exists(proxy.pid), "nginx should be stopped after the run"
    deadline = time.monotonic() + 10
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_members(pgid), f"{name} left processes behind: {_group_members(pgid)}"


@pytest.mark.slow  # a whole quick run, ~10 s on 2 cores: the slow step runs it
def test_the_benchmark_writes_its_json_and_table_from_a_quick_run_under_local_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = BY_NAME["gunicorn-falcon"]
    if app.missing():
        pytest.skip(app.missing())
    # A configuration on a loop that cannot import: it must become a skipped row, with the reason.
    monkeypatch.setitem(notfaster_apps.LOOPS, "nowhere", "tinyloop.nowhere:new_event_loop")
    nowhere = notfaster_apps.App("aiohttp-nowhere", "aiohttp", "nowhere", "async")
    monkeypatch.setattr(notfaster_bench, "APPS", (*APPS, nowhere))
    # As a new user types it: --quick, no --out; the committed results stay as they were.
    committed = ["git", "status", "--porcelain", "--", "benchmarks/results"]
    before = subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout
    argv = ["--quick", "--apps", "gunicorn-falcon,aiohttp-nowhere", "--max-workers", "1",
            "--cpus-load", "any", "--cpus-proxy", "any", "--cpus-app", "any", "--cpus-db", "any"]
    status = notfaster_bench.main(argv)
    if status == 1:
        pytest.skip("a service is missing (the harness printed which)")
    assert status == 0, "the quick run should succeed"
    assert subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout == before
    out = ROOT / "benchmarks" / "results" / "local" / "notfaster.json"
    data = json.loads(out.read_text())
    entry = data["layouts"]["load=any proxy=any app=any db=any"]
    (row,) = entry["rows"]
    assert row["app"] == "gunicorn-falcon" and row["workers"] == 1, row
    assert row["status"] == "ok" and row["rps"] and row["p99_ms"] and row["server_us_per_req"], (
        f"the run should report req/s, p99 and CPU per request: {row}")
    assert "tinyloop.nowhere" in entry["skipped"]["aiohttp-nowhere"], (
        f"a loop that does not import is a skipped row that says why: {entry['skipped']}")
    table = out.with_suffix(".md").read_text()
    assert "| gunicorn-falcon | 1 |" in table and entry["versions"]["postgresql"] in table
    assert "aiohttp-nowhere skipped" in table


def test_cpu_lists_and_the_default_layout() -> None:
    assert cpu_list([0, 1, 2, 5]) == "0-2,5"
    assert cpu_list([3]) == "3"
    assert cpu_set("0-2,5") == {0, 1, 2, 5} and cpu_set([1]) == {1}
    layout = notfaster_bench.default_layout()
    usable = usable_cpus()
    if len(usable) >= 2:
        load = cpu_set(layout.load)
        rest = cpu_set(layout.app)
        assert load and rest and not load & rest, "the load generator gets cores of its own"
        assert layout.proxy == layout.app == layout.db, "nginx, the app and PostgreSQL share the rest"
        assert load | rest == set(usable)


def test_an_app_whose_worker_search_found_no_count_is_a_failed_row_the_table_still_shows() -> None:
    app = APPS[0]
    probes = [{"workers": 1, "rps": None, "p99_ms": None, "status": "error", "note": "wrk completed no request"}]
    row = notfaster_bench.summarize(app, None, [], probes)
    assert row["status"] == "failed" and row["note"] == "wrk completed no request"
    assert all(row[figure] is None for figure in notfaster_bench.FIGURES)
    ok = {**row, "app": "other", "status": "ok", "note": None, "workers": 1, "rps": 900.0, "p50_ms": 9.0,
          "p99_ms": 20.0, "search": []}
    rows = sorted([row, ok], key=notfaster_bench.calm_order)
    assert [r["app"] for r in rows] == ["other", app.name], "a row without figures sorts last"
    data = {"layouts": {"default": {"rows": rows}}}
    assert notfaster_bench.conclusion(data).startswith("default: best p99 other")
