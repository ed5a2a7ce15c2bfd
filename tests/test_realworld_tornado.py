"""Part V §2 end to end: the Tornado article's app on tinyloop.aio, with PostgreSQL and an upstream.

Nothing is mocked: a real PostgreSQL (benchmarks/realworld/services.py),
tinyloop's epoll stage as the upstream, and the app as the harness starts
it (benchmarks/realworld/tornado_app.py).  Skipped, with the message naming
what to install, where PostgreSQL or asyncpg is missing.  The harness's
plumbing is checked on a run of a few requests; speed is never checked.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import importlib
import os
import subprocess
import shutil
import sys

import pytest

from benchmarks.harness.machine import ROOT
from benchmarks.realworld import services
from tinyloop.testing import ServerProcess

pytest.importorskip("asyncpg")
pytest.importorskip("tornado")
tornado_app = importlib.import_module("benchmarks.realworld.tornado_app")  # after the skips: it imports both
tornado_bench = importlib.import_module("benchmarks.realworld.tornado_bench")

pytestmark = pytest.mark.timeout(120)
ROWS = 20


def _get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_app_on_aio_answers_every_handler_with_postgres_and_upstream() -> None:
    try:
        manager = services.postgres(rows=ROWS)
        pg = manager.__enter__()
    except services.ServiceMissing as missing:
        pytest.skip(str(missing))
    try:
        with ServerProcess("epoll") as upstream:
            command = [sys.executable, "-m", "benchmarks.realworld.tornado_app", "--loop", "aio", "--port", "0",
                       "--dsn", pg.dsn, "--rows", str(ROWS), "--upstream", f"http://127.0.0.1:{upstream.port}/"]
            with ServerProcess("tornado-aio", command=command, timeout=30) as app:
                assert _get(app.port, "/hello") == (200, tornado_app.HELLO.encode())
                status, body = _get(app.port, "/upstream")
                assert status == 200 and body.startswith(b"Hello"), f"/upstream relays the upstream's body: {body!r}"
                for path in ("/db", "/db-connect", "/db"):
                    status, body = _get(app.port, path)
                    assert status == 200, f"{path} answered {status}: {body!r}"
                    assert len(body) == len("row 0000001") and body.startswith(b"row "), body

            async def updated() -> int:
                import asyncpg

                connection = await asyncpg.connect(pg.dsn)
                try:
                    return await connection.fetchval("SELECT count(*) FROM items WHERE value LIKE '%, read %'")
                finally:
                    await connection.close()

            assert 1 <= asyncio.run(updated()) <= 3, "each /db request wrote one row back"
            assert "tornado-aio: stopped" in "".join(app.stderr_lines), "the app stops cleanly on SIGTERM"
    finally:
        manager.__exit__(None, None, None)


def test_app_picks_its_loop_by_name_and_a_missing_loop_has_a_reason() -> None:
    assert {"asyncio", "uvloop", "aio", "uv"} <= set(tornado_app.LOOPS)
    assert tornado_bench.loop_missing("aio") is None
    assert tornado_bench.loop_missing("asyncio") is None


@pytest.mark.skipif(shutil.which("ab") is None, reason="ab (apache2-utils) is not installed")
def test_bench_quick_run_writes_json_and_table_under_local_only(capsys) -> None:
    # As a new user types it (a part of it): --quick, no --out; the committed results stay as they were.
    committed = ["git", "status", "--porcelain", "--", "benchmarks/results"]
    before = subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout
    cores = os.sched_getaffinity(0)
    assert tornado_bench.main(["--quick", "--loops", "aio", "--handlers", "hello", "--tools", "ab"]) == 0
    assert os.sched_getaffinity(0) == cores, "the harness gives the caller its cores back"
    assert subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout == before
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("most req/s per handler: hello (ab) aio ")
    out = ROOT / "benchmarks" / "results" / "local" / "tornado.json"
    data = json.loads(out.read_text())
    (row,) = data["results"]
    assert (row["handler"], row["tool"], row["loop"], row["ok_runs"]) == ("hello", "ab", "aio", 1), row
    assert row["rps"] and row["app_cpu_us_per_req"] is not None
    table = out.with_suffix(".md").read_text()
    assert "| /hello | ab | aio |" in table and "tornado " in table


def test_table_shows_skips_failures_and_only_the_relevant_cpu_columns() -> None:
    runs = [
        {"loop": "aio", "handler": "db", "tool": "wrk", "status": "ok", "note": None, "rps": 100.0,
         "p50_ms": 9.0, "p99_ms": 20.0, "completed": 500, "failed": 2, "seconds": 5.0,
         "app_cpu_us_per_req": 800.0, "db_cpu_us_per_req": 300.0, "upstream_cpu_us_per_req": 1.0},
        {"loop": "uvloop", "handler": "hello", "tool": "ab", "status": "error", "note": "did not start",
         "rps": None, "p50_ms": None, "p99_ms": None, "completed": None, "failed": None, "seconds": None,
         "app_cpu_us_per_req": None, "db_cpu_us_per_req": None, "upstream_cpu_us_per_req": None},
    ]
    data = {"date": "2026-01-01T00:00:00+00:00", "command": "python -m benchmarks.realworld.tornado_bench",
            "machine": {"cpu_model": "CPU", "cpus": 2, "python": "CPython 3.11.7"},
            "versions": {"tornado": "6.4", "postgres": "postgres (PostgreSQL) 15.18 (Debian)"},
            "layout": {"app": "0", "load": "1", "database": "1", "upstream": "1"},
            "settings": {"repeat": 3, "duration_s": 5.0}, "skipped": {"loop uv": "no module"},
            "results": tornado_bench.summarize(runs)}
    table = tornado_bench.markdown(data)
    assert "| /db | wrk | aio | 100 | 9.0 | 20.0 | 800 | 300 | — |" in table, table
    assert "| /hello | ab | uvloop | 1 of 1 runs: error (did not start) |" in table
    assert "Not measured: loop uv (no module)." in table
    assert "PostgreSQL 15.18" in table and "/db wrk aio: 2" in table
