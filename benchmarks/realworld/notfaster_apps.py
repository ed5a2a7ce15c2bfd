# benchmarks/realworld/notfaster_apps.py
"""The applications of "Async Python is not faster" (Cal Paterson, 2020), rebuilt for the book.

One endpoint, ``GET /row -> 200 {"id": 123, "value": "value 123"}``: one indexed SELECT of a random
key of services.postgres()'s ``items``.  The rows of APPS change only the server (gunicorn's sync
workers, uvicorn, aiohttp's own), the framework, the driver and (async) the loop.  Every pool opens
in its worker, after the fork.  A command needs only its arguments, NOTFASTER_DSN and NOTFASTER_ROWS:

    python -m benchmarks.realworld.notfaster_apps aiohttp --loop aio --workers 2 --port 8001
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import random
import signal
import sys
import traceback
from dataclasses import dataclass

from benchmarks.harness.machine import ROOT
from benchmarks.peers.echo_server import LOOPS, loop_factory, stop_event
from tinyloop.serving import announce, listen, log, stop_on_sigterm

DSN_ENV = "NOTFASTER_DSN"    # a libpq URI: "postgresql://postgres@127.0.0.1:PORT/bench"
ROWS_ENV = "NOTFASTER_ROWS"  # how many rows the table holds: keys are 1..rows
PATH = "/row"
# Each driver's placeholder: psycopg's %s (PEP 249 "format"), asyncpg's PostgreSQL-native $1.
QUERY_PSYCOPG = "SELECT id, value FROM items WHERE id = %s"
QUERY_ASYNCPG = "SELECT id, value FROM items WHERE id = $1"
# (min, max) connections per worker process: the article's (psycopg2 1-4 per sync worker, aiopg's
# 10 per async one); the async pool opens full (the chapter says why).
SYNC_POOL = (1, 4)
ASYNC_POOL = (10, 10)


def loop_missing(name: str) -> str | None:
    """None when loop ``name`` imports here, else why not (AttributeError too: an extension not
    built yet imports as an empty namespace package)."""
    try:
        loop_factory(name)
    except (ImportError, AttributeError) as exc:
        return f"{LOOPS[name]}: {exc}"
    return None


def _settings() -> tuple[str, int]:
    """``(dsn, rows)`` from the environment; KeyError names the missing variable."""
    return os.environ[DSN_ENV], int(os.environ[ROWS_ENV])


# marker: notfaster-falcon begin
class RowResource:
    """Falcon resource for GET /row: one pooled connection for the length of one query."""

    def __init__(self, pool, rows: int) -> None:
        self.pool, self.rows = pool, rows

    def on_get(self, req, resp) -> None:
        key = random.randint(1, self.rows)
        with self.pool.connection() as conn:  # blocks this worker until PostgreSQL answers
            id_, value = conn.execute(QUERY_PSYCOPG, (key,)).fetchone()
        resp.media = {"id": id_, "value": value}


def falcon_app():
    """The WSGI application, built in each gunicorn worker (gunicorn calls ``falcon_app()``)."""
    import falcon
    from psycopg_pool import ConnectionPool

    dsn, rows = _settings()
    pool = ConnectionPool(dsn, min_size=SYNC_POOL[0], max_size=SYNC_POOL[1], open=True)
    pool.wait()  # the first connection is up before the first request
    app = falcon.App()
    app.add_route(PATH, RowResource(pool, rows))
    return app
# marker: notfaster-falcon end


# marker: notfaster-starlette begin
def starlette_app():
    """The ASGI application (uvicorn ``--factory`` calls this in each worker)."""
    import contextlib

    import asyncpg
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    dsn, rows = _settings()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        # Opened on the worker's own loop, which asyncpg's sockets belong to.
        app.state.pool = await asyncpg.create_pool(dsn, min_size=ASYNC_POOL[0], max_size=ASYNC_POOL[1])
        try:
            yield
        finally:
            await app.state.pool.close()

    async def row(request):
        key = random.randint(1, rows)
        # await: this request yields the loop to the others until PostgreSQL answers.
        id_, value = await request.app.state.pool.fetchrow(QUERY_ASYNCPG, key)
        return JSONResponse({"id": id_, "value": value})

    return Starlette(routes=[Route(PATH, row)], lifespan=lifespan)
# marker: notfaster-starlette end


# marker: notfaster-aiohttp begin
def aiohttp_app():
    """The aiohttp application; its pool opens in on_startup, on the running loop."""
    import asyncpg
    from aiohttp import web

    dsn, rows = _settings()

    async def open_pool(app):
        app["pool"] = await asyncpg.create_pool(dsn, min_size=ASYNC_POOL[0], max_size=ASYNC_POOL[1])

    async def close_pool(app):
        await app["pool"].close()

    async def row(request):
        key = random.randint(1, rows)
        id_, value = await request.app["pool"].fetchrow(QUERY_ASYNCPG, key)
        return web.json_response({"id": id_, "value": value})

    app = web.Application()
    app.router.add_get(PATH, row)
    app.on_startup.append(open_pool)
    app.on_cleanup.append(close_pool)
    return app
# marker: notfaster-aiohttp end


async def _serve_aiohttp(sock, name: str) -> None:
    """Serve aiohttp_app() on ``sock`` until SIGTERM or SIGINT (one worker process)."""
    from aiohttp import web

    stop = stop_event()
    runner = web.AppRunner(aiohttp_app(), access_log=None)
    await runner.setup()
    try:
        await web.SockSite(runner, sock, backlog=1024).start()
        await stop.wait()
    finally:
        await runner.cleanup()
    log(f"{name} worker {os.getpid()}: stopped")


def serve_aiohttp(loop_name: str, workers: int, port: int) -> None:
    """Bind one socket, fork ``workers`` processes that each serve it on loop ``loop_name``, as gunicorn
    and uvicorn do.  The parent passes SIGTERM or Ctrl-C on to the workers; if a worker dies, it stops
    the others and exits 1 (a row must fail loudly, not go on with fewer workers)."""
    factory = loop_factory(loop_name)
    name = f"aiohttp-{loop_name}"
    sock = listen("127.0.0.1", port)
    children: list[int] = []
    for _ in range(workers):
        if (pid := os.fork()) == 0:  # the worker
            status = 0
            try:
                with asyncio.Runner(loop_factory=factory) as runner:
                    runner.run(_serve_aiohttp(sock, name))
            except KeyboardInterrupt:
                pass
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                os._exit(status)
        children.append(pid)
    announce(name, sock)
    sock.close()  # the workers hold it; the parent never accepts
    stop_on_sigterm()
    status = 0
    try:
        pid, wait_status = os.wait()
        children.remove(pid)
        log(f"{name}: worker {pid} died ({wait_status:#x}); stopping the others")
        status = 1
    except KeyboardInterrupt:
        pass
    finally:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        for pid in children:  # the harness SIGKILLs a worker that does not stop
            os.waitpid(pid, 0)
    sys.exit(status)


@dataclass(frozen=True)
class App:
    """One row of the benchmark: a server, a framework and (for async) a loop."""

    name: str
    server: str          # "gunicorn", "uvicorn" or "aiohttp"
    loop: str | None     # a LOOPS key, None for sync workers
    kind: str            # "sync" or "async"

    def command(self, port: int, workers: int) -> list[str]:
        """The argument list that serves GET /row on 127.0.0.1:``port`` with ``workers`` processes."""
        python, module = sys.executable, "benchmarks.realworld.notfaster_apps"
        if self.server == "gunicorn":
            return [python, "-m", "gunicorn", "--chdir", str(ROOT), "--workers", str(workers),
                    "--worker-class", "sync", "--bind", f"127.0.0.1:{port}", "--backlog", "1024",
                    "--log-level", "warning", f"{module}:falcon_app()"]
        if self.server == "uvicorn":
            # uvicorn >= 0.36 takes "--loop module:callable" and calls it for each worker's loop.
            return [python, "-m", "uvicorn", "--app-dir", str(ROOT), "--factory",
                    "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                    "--loop", LOOPS[self.loop], "--backlog", "1024",
                    "--no-access-log", "--log-level", "warning", f"{module}:starlette_app"]
        if self.server == "aiohttp":
            return [python, "-m", module, "aiohttp", "--loop", self.loop,
                    "--workers", str(workers), "--port", str(port)]
        raise ValueError(f"unknown server {self.server!r}")

    def missing(self) -> str | None:
        """None when this row can run here, else why not (a loop or a library that does not import)."""
        modules = {"gunicorn": ("gunicorn", "falcon", "psycopg", "psycopg_pool"),
                   "uvicorn": ("uvicorn", "starlette", "asyncpg"),
                   "aiohttp": ("aiohttp", "asyncpg")}[self.server]
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                return f"{module} is not installed ({exc}); pip install -e '.[dev]'"
        return loop_missing(self.loop) if self.loop else None


APPS: tuple[App, ...] = (
    App("gunicorn-falcon", "gunicorn", None, "sync"),
    *(App(f"uvicorn-starlette-{loop}", "uvicorn", loop, "async") for loop in LOOPS),
    *(App(f"aiohttp-{loop}", "aiohttp", loop, "async") for loop in LOOPS),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the not-faster endpoint with aiohttp on any loop.")
    parser.add_argument("server", choices=("aiohttp",))
    parser.add_argument("--loop", choices=tuple(LOOPS), default="asyncio")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    serve_aiohttp(args.loop, args.workers, args.port)


if __name__ == "__main__":
    main()
