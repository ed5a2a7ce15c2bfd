# benchmarks/realworld/notfaster_apps.py
#
# The applications of "Async Python is not faster" (Cal Paterson, 2020),
# rebuilt for the book: one endpoint, written once per framework, that reads
# one row of PostgreSQL by a random key and returns it as JSON.
#
#   GET /row  ->  200 {"id": 123, "value": "value 123"}
#
#   gunicorn-falcon         gunicorn's sync workers (one request at a time
#                           per process, preempted by the kernel), Falcon
#                           (WSGI), a psycopg 3 connection pool
#   uvicorn-starlette-LOOP  uvicorn + Starlette (ASGI), an asyncpg pool, on
#                           each loop of NOTFASTER_LOOPS
#   aiohttp-LOOP            aiohttp's own server, an asyncpg pool, on each
#                           loop, several worker processes sharing one socket
#
# Rules this file keeps:
#   * The same work everywhere: one indexed SELECT on a primary key, a
#     random key in 1..rows, the row as a two-field JSON object.  Only the
#     server, the framework, the driver and the loop change between rows.
#   * The loops come from benchmarks/peers/echo_server.py's LOOPS (imported,
#     not copied), ``uv`` among them; a loop that
#     does not import is a skipped row, with the ImportError's words.
#   * Every pool is opened inside the worker process, after the fork: a
#     database connection is a socket with a conversation's state, and two
#     processes must never share one.
#   * Everything a command needs is in its argument list and two environment
#     variables (NOTFASTER_DSN, NOTFASTER_ROWS), so the harness and the test
#     start the same commands, and a reader can paste them into a shell.
#
# Usage (the harness does this; by hand, from the repository's root):
#   python -m benchmarks.realworld.notfaster_apps aiohttp --loop aio --workers 2 --port 8001

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import random
import signal
import sys
import time
from dataclasses import dataclass

from benchmarks.harness.machine import ROOT
from benchmarks.peers.echo_server import LOOPS, loop_factory, stop_event
from tinyloop.serving import announce, listen, log, stop_on_sigterm

__all__ = ["APPS", "ASYNC_POOL", "NOTFASTER_LOOPS", "PATH", "SYNC_POOL", "App", "aiohttp_app",
           "falcon_app", "loop_factory", "loop_missing", "main", "starlette_app"]

DSN_ENV = "NOTFASTER_DSN"    # a libpq URI: "postgresql://postgres@127.0.0.1:PORT/bench"
ROWS_ENV = "NOTFASTER_ROWS"  # how many rows the table holds: keys are 1..rows
PATH = "/row"

# The table is services.postgres()'s items(id int primary key, value text),
# ids 1..rows: the article's shape (an integer key, a text column).  Each
# driver has its placeholder style: psycopg takes %s (PEP 249's "format"),
# asyncpg PostgreSQL's own $1 (it sends the query to the server as is).
QUERY_PSYCOPG = "SELECT id, value FROM items WHERE id = %s"
QUERY_ASYNCPG = "SELECT id, value FROM items WHERE id = $1"

# Pool sizes per worker process, (min, max) connections.
# Discussion: the article gave each sync worker a psycopg2 pool of 1 to 4
# connections and each async worker aiopg's default pool, 1 to 10.  A sync
# worker serves one request at a time, so it never holds more than one of
# its connections: its pool only saves the connect per request.  An async
# worker holds one connection per request in flight, so its pool's maximum
# is how many queries one process can have waiting on PostgreSQL at once;
# past 10 a request waits for a connection inside the app.  We keep the
# article's maxima.  We open the async pool full at start (min = max), so
# that no measured request pays for a connect, and the sync pool with its
# one connection (min 1), which is all a sync worker ever uses.
SYNC_POOL = (1, 4)
ASYNC_POOL = (10, 10)

# Loop name -> "module:function" returning a new event loop: the echo
# benchmark's table (Part IV's ``uv`` is a row of it), by import.
NOTFASTER_LOOPS: dict[str, str] = LOOPS


def loop_missing(name: str) -> str | None:
    """None when loop ``name`` imports here, else the reason it does not (the error's message).

    AttributeError counts too: a stage still being built (a directory of
    .pyx sources with no extension built yet) imports as an empty namespace
    package, without the factory.
    """
    try:
        loop_factory(name)
    except (ImportError, AttributeError) as exc:
        return f"{NOTFASTER_LOOPS[name]}: {exc}"
    return None


def _settings() -> tuple[str, int]:
    """``(dsn, rows)`` from the environment; KeyError names the missing variable."""
    return os.environ[DSN_ENV], int(os.environ[ROWS_ENV])


# --- sync: gunicorn + Falcon + psycopg_pool ---------------------------------

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


# --- async: uvicorn + Starlette + asyncpg -----------------------------------

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


# --- async: aiohttp + asyncpg -----------------------------------------------

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
    """Bind one socket, fork ``workers`` processes that each serve it on loop ``loop_name``.

    The parent only supervises: on SIGTERM or Ctrl-C it passes SIGTERM to
    every worker and waits for them; if a worker dies on its own, the parent
    stops the others and exits with status 1 (a benchmark row must fail
    loudly, not go on with fewer workers).
    """
    # Discussion: gunicorn and uvicorn do the same: the parent binds and
    # listens once, and every forked worker inherits the listening socket
    # and calls accept() on it; the kernel hands each new connection to one
    # of the waiting workers.  Forking before any loop exists keeps each
    # worker's loop, selector and pool its own.
    factory = loop_factory(loop_name)
    name = f"aiohttp-{loop_name}"
    sock = listen("127.0.0.1", port)
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # the worker
            status = 0
            try:
                with asyncio.Runner(loop_factory=factory) as runner:
                    runner.run(_serve_aiohttp(sock, name))
            except KeyboardInterrupt:
                pass
            except BaseException:
                import traceback

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
        _stop_children(children)
    sys.exit(status)


def _stop_children(children: list[int], timeout: float = 10.0) -> None:
    """SIGTERM each child, wait up to ``timeout`` seconds in all, then SIGKILL the rest."""
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while children:
        for pid in list(children):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                children.remove(pid)
        if children and time.monotonic() > deadline:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            children.clear()
        time.sleep(0.05)


# --- the table of configurations --------------------------------------------

@dataclass(frozen=True)
class App:
    """One row of the benchmark: a server, a framework and (for async) a loop.

    ``command(port, workers)`` is the argument list that serves GET /row on
    127.0.0.1:``port`` with ``workers`` processes, run from the repository's
    root with NOTFASTER_DSN and NOTFASTER_ROWS set.
    """

    name: str
    server: str          # "gunicorn", "uvicorn" or "aiohttp"
    loop: str | None     # a NOTFASTER_LOOPS key, None for sync workers
    kind: str            # "sync" or "async"

    def command(self, port: int, workers: int) -> list[str]:
        python = sys.executable
        module = "benchmarks.realworld.notfaster_apps"
        if self.server == "gunicorn":
            return [python, "-m", "gunicorn", "--chdir", str(ROOT), "--workers", str(workers),
                    "--worker-class", "sync", "--bind", f"127.0.0.1:{port}", "--backlog", "1024",
                    "--log-level", "warning", f"{module}:falcon_app()"]
        if self.server == "uvicorn":
            # Discussion: uvicorn >= 0.36 takes "--loop module:callable" and
            # calls that callable for each worker's new loop (it hands it to
            # asyncio.Runner as loop_factory), so every loop, ours included,
            # runs under uvicorn's own command line, workers and all.
            return [python, "-m", "uvicorn", "--app-dir", str(ROOT), "--factory",
                    "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                    "--loop", NOTFASTER_LOOPS[self.loop], "--backlog", "1024",
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
    *(App(f"uvicorn-starlette-{loop}", "uvicorn", loop, "async") for loop in NOTFASTER_LOOPS),
    *(App(f"aiohttp-{loop}", "aiohttp", loop, "async") for loop in NOTFASTER_LOOPS),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the not-faster endpoint with aiohttp on any loop.")
    parser.add_argument("server", choices=("aiohttp",))
    parser.add_argument("--loop", choices=tuple(NOTFASTER_LOOPS), default="asyncio")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    serve_aiohttp(args.loop, args.workers, args.port)


if __name__ == "__main__":
    main()
