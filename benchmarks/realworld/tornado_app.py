# benchmarks/realworld/tornado_app.py
"""The Tornado article's application (a 2017 post: tornado on its own IOLoop, on asyncio, on
uvloop), rebuilt for tornado 6 and run on any loop of benchmarks/peers/echo_server.py's LOOPS:

    GET /hello        a short string, no I/O: the framework and the loop alone
    GET /upstream     the body of GET / on a local upstream server, fetched with AsyncHTTPClient
    GET /db           one row of items read and updated in a transaction, through an asyncpg pool
    GET /db-connect   the same on a connection opened for this request: the article's "short connection"

It prints ``tinyloop: serving tornado-LOOP on http://127.0.0.1:PORT/`` when it listens and stops
on SIGTERM or Ctrl-C; the harness runs it as a reader would:

    python -m benchmarks.realworld.tornado_app --loop aio --port 8001 \\
        --dsn postgresql://postgres@127.0.0.1:5432/bench --rows 1000 --upstream http://127.0.0.1:8002/
"""

from __future__ import annotations

import argparse
import asyncio
import random

import asyncpg
import tornado
import tornado.httpclient
import tornado.httpserver
import tornado.web

from benchmarks.peers.echo_server import LOOPS, loop_factory, stop_event
from tinyloop.serving import announce, listen, log

HELLO = "Hello, tornado"  # /hello's body
# Handler name -> path; the harness measures them in this order.
HANDLERS: dict[str, str] = {"hello": "/hello", "upstream": "/upstream", "db": "/db",
                            "db-connect": "/db-connect"}
# asyncpg's own defaults (min_size, max_size), written out: at most 10 transactions in PostgreSQL
# at once; the other requests of ``-c 100`` wait for a connection inside the app.
POOL = (10, 10)
# Read-modify-write: the row is locked from the SELECT to the COMMIT, so two
# requests drawing the same id take turns instead of losing an update.
SELECT = "SELECT value FROM items WHERE id = $1 FOR UPDATE"
UPDATE = "UPDATE items SET value = $2 WHERE id = $1"


class HelloHandler(tornado.web.RequestHandler):
    def get(self) -> None:
        self.finish(HELLO)


class UpstreamHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        # Discussion: AsyncHTTPClient() is a per-loop singleton, and
        # tornado 6's default implementation (SimpleAsyncHTTPClient) keeps
        # at most max_clients=10 fetches in flight, queueing the rest, and
        # opens a new connection for every fetch (it sends "Connection:
        # close"; only the curl-based client reuses connections).  So this
        # handler pays a TCP connect and an accept on the upstream per
        # request: the article's configuration, which the book keeps.
        response = await tornado.httpclient.AsyncHTTPClient().fetch(self.application.upstream)
        self.finish(response.body)


# marker: tornado-db begin
async def read_and_update(connection: asyncpg.Connection, rows: int) -> str:
    """Read a random row of items and write a new value into it, in one transaction.

    Four round trips to PostgreSQL: BEGIN, SELECT, UPDATE, COMMIT.  Returns
    the response body, ``"row 0000042"``: the same length for every id, as
    ab requires (it counts a body whose length differs from the first one's
    as a failed request).
    """
    key = random.randint(1, rows)
    async with connection.transaction():
        value = await connection.fetchval(SELECT, key)
        await connection.execute(UPDATE, key, f"value {key}, read {len(value)}")
    return f"row {key:07d}"


class PoolHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        # A connection from the pool, opened at start, returned at the end of the block.
        async with self.application.pool.acquire() as connection:
            body = await read_and_update(connection, self.application.rows)
        self.finish(body)


class ConnectHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        # A connection of its own: TCP connect, startup and authentication
        # messages, a new backend process forked by the postmaster, then the
        # same work, then the backend exits.
        connection = await asyncpg.connect(self.application.dsn)
        try:
            body = await read_and_update(connection, self.application.rows)
        finally:
            await connection.close()
        self.finish(body)
# marker: tornado-db end


class TornadoApp(tornado.web.Application):
    """The four handlers, with what they share: the pool, the DSN, the upstream's URL."""

    def __init__(self, pool: asyncpg.Pool | None, dsn: str | None, rows: int, upstream: str | None) -> None:
        self.pool, self.dsn, self.rows, self.upstream = pool, dsn, rows, upstream
        routes = [(HANDLERS["hello"], HelloHandler)]
        if upstream:
            routes.append((HANDLERS["upstream"], UpstreamHandler))
        if dsn:
            routes += [(HANDLERS["db"], PoolHandler), (HANDLERS["db-connect"], ConnectHandler)]
        # No debug=True (the article had it): autoreload watches files and
        # would be measured along with the loop.
        super().__init__(routes)


async def serve(name: str, port: int, dsn: str | None, rows: int, upstream: str | None) -> None:
    """Open the pool, serve the app on 127.0.0.1:``port`` until SIGTERM or SIGINT, close everything."""
    stop = stop_event()
    pool = await asyncpg.create_pool(dsn, min_size=POOL[0], max_size=POOL[1]) if dsn else None
    sock = listen("127.0.0.1", port)
    # tornado accepts in a loop until accept() raises BlockingIOError (as
    # many as the backlog per readiness event): on a blocking socket that
    # loop would block the whole loop in accept() once the queue is empty.
    sock.setblocking(False)
    server = tornado.httpserver.HTTPServer(TornadoApp(pool, dsn, rows, upstream))
    server.add_sockets([sock])
    try:
        announce(name, sock)
        await stop.wait()
    finally:
        server.stop()
        await server.close_all_connections()
        if pool is not None:
            await pool.close()
    log(f"{name}: stopped")


# marker: tornado-loop begin
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The Tornado article's app on any asyncio loop.")
    parser.add_argument("--loop", choices=tuple(LOOPS), default="asyncio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dsn", help="PostgreSQL URI for /db and /db-connect (omit: no database handlers)")
    parser.add_argument("--rows", type=int, default=1000, help="ids in items are 1..ROWS")
    parser.add_argument("--upstream", help="URL /upstream fetches (omit: no /upstream)")
    args = parser.parse_args(argv)
    name = f"tornado-{args.loop}"
    # The loop is chosen here and nowhere else: asyncio.Runner calls the
    # factory, makes the new loop current and runs serve() on it.  Tornado's
    # IOLoop.current(), its HTTP server and client, and asyncpg all find
    # that loop through asyncio.get_running_loop().
    try:
        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            runner.run(serve(name, args.port, args.dsn, args.rows, args.upstream))
    except KeyboardInterrupt:
        log(f"{name}: stopped")
# marker: tornado-loop end


if __name__ == "__main__":
    main()
