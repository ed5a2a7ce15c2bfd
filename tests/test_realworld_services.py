"""Part V's real services start, answer and stop: PostgreSQL through asyncpg, nginx as a proxy.

Nothing is mocked: these start the system's postgres and nginx
(benchmarks/realworld/services.py).  Where one is not installed its tests
are skipped with ServiceMissing's message, which names the package.  Every
wait is bounded: a service that does not start fails in seconds.
"""

from __future__ import annotations

import asyncio
import os
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from benchmarks.realworld import services

pytestmark = pytest.mark.timeout(60)  # pytest-timeout: a service that hangs fails the test


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start(manager):
    """Enter a service's context manager, or skip the test with ServiceMissing's message."""
    try:
        return manager.__enter__()
    except services.ServiceMissing as missing:
        pytest.skip(str(missing))


def test_postgres_starts_answers_through_asyncpg_and_is_removed() -> None:
    asyncpg = pytest.importorskip("asyncpg")
    manager = services.postgres(rows=10)
    pg = _start(manager)
    try:
        assert os.path.isdir(pg.directory) and _alive(pg.pid), "postgres should be running in its directory"
        assert pg.dsn == f"postgresql://postgres@127.0.0.1:{pg.port}/bench"
        assert "PostgreSQL" in pg.version, f"the version line names the server: {pg.version!r}"
        assert os.path.exists(os.path.join(pg.directory, f".s.PGSQL.{pg.port}")), "the Unix socket is in directory"

        async def query() -> tuple[int, str, int]:
            connection = await asyncpg.connect(pg.dsn, timeout=10)
            try:
                row = await connection.fetchrow("SELECT id, value FROM items WHERE id = $1", 7)
                count = await connection.fetchval("SELECT count(*) FROM items")
            finally:
                await connection.close()
            return row["id"], row["value"], count

        assert asyncio.run(query()) == (7, "value 7", 10)
        assert services.process_tree_cpu(pg.pid) > 0, "the postmaster and its backends have used some CPU"
    finally:
        manager.__exit__(None, None, None)
    assert not os.path.exists(pg.directory), "the data directory is removed at exit"
    assert not _alive(pg.pid), "the postmaster is gone at exit"


class _Upstream(BaseHTTPRequestHandler):
    """A tiny HTTP/1.1 upstream that says which path it was asked for."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"upstream saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_nginx_proxies_to_its_upstream_and_stops(upstream: int) -> None:
    manager = services.nginx([upstream])
    proxy = _start(manager)
    try:
        assert proxy.version.startswith("nginx version"), proxy.version
        for _ in range(3):  # the second and third reuse the upstream keep-alive connection
            with urllib.request.urlopen(f"http://127.0.0.1:{proxy.port}/items/3", timeout=10) as response:
                assert response.status == 200
                assert response.read() == b"upstream saw /items/3"
    finally:
        manager.__exit__(None, None, None)
    assert not os.path.exists(proxy.directory), "nginx's directory is removed at exit"
    assert not _alive(proxy.pid), "nginx's master is gone at exit"


def test_missing_binary_raises_service_missing_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services.shutil, "which", lambda name, path=None: None)
    with pytest.raises(services.ServiceMissing, match="nginx-light"):
        with services.nginx([1]):
            pass


def test_missing_postgres_raises_service_missing_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services.shutil, "which", lambda name: None)
    monkeypatch.setattr(services, "glob", lambda pattern: [])
    with pytest.raises(services.ServiceMissing, match="apt-get install postgresql"):
        with services.postgres():
            pass
