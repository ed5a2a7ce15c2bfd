"""Stage ``coroutines``: the HTTP server as one ``async def`` per connection,
on our streams, Tasks and the callbacks reactor.

    data = await reader.read(READ_SIZE)      # suspend until bytes come
    response = http.receive_data(data)       # the sans-I/O HTTP layer
    writer.write(response)
    await writer.drain()                     # suspend while the client is slow

It reads like the threaded server and runs like the callbacks server: each
``await`` is where the Task hands the thread back to the reactor.

And that is also its weakness, which this file lets you measure.  Between
two ``await``s a handler runs alone: a handler that computes for 50 ms
(``GET /compute?ms=50``) holds up every other connection for 50 ms.  The
environment variable TINYLOOP_COMPUTE picks how the server runs handlers,
so benchmarks/fairness.py can compare the fixes on the same code:

    inline   (default) everything on the loop's thread: the problem
    thread   each HTTPConnection.receive_data call runs in a thread pool
             (await run_in_executor), as frameworks run synchronous views
    yield    /compute spends its milliseconds in 1 ms slices with
             ``await sleep(0)`` between them, giving the loop back

Rules this file keeps:
  * One task per connection; its ``finally`` closes the writer (and with it
    the socket), on every way out: end of stream, error, cancellation.
  * Backpressure by ``await writer.drain()`` after every write: a client
    that does not read stops its own handler, and so stops being read.
  * Ctrl-C and SIGTERM arrive as KeyboardInterrupt out of the reactor;
    ``run`` then cancels every task (the server closes its connections in
    ``serve_forever``'s finally, each handler its own) and closes the loop.
"""

from __future__ import annotations

import functools
import os
import socket

from tinyloop.baseline.blocking import READ_SIZE
from tinyloop.coroutines.futures import run_in_executor
from tinyloop.coroutines.streams import StreamReader, StreamWriter, start_server
from tinyloop.coroutines.tasks import run, sleep
from tinyloop.http import HTTPConnection, hello_app
from tinyloop.http.app import burn_cpu

__all__ = ["COMPUTE_ENV", "MODES", "SLICE_MS", "compute_cooperatively", "compute_mode",
           "handle_connection", "main", "serve"]

COMPUTE_ENV = "TINYLOOP_COMPUTE"
MODES = ("inline", "thread", "yield")
# In ``yield`` mode, CPU time is spent in slices this long (milliseconds)
# between two visits to the loop.
SLICE_MS = 1


def compute_mode() -> str:
    """The mode named by TINYLOOP_COMPUTE (default ``inline``); ValueError if unknown."""
    mode = os.environ.get(COMPUTE_ENV, "inline")
    if mode not in MODES:
        raise ValueError(f"{COMPUTE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def serve(listener: socket.socket) -> None:
    """Serve HTTP on ``listener`` (bound, listening) until KeyboardInterrupt, then close all."""
    run(main(listener, compute_mode()))


async def main(listener: socket.socket, mode: str = "inline") -> None:
    """Accept connections on ``listener`` and run :func:`handle_connection` for each, until cancelled."""
    server = await start_server(functools.partial(handle_connection, mode=mode), sock=listener)
    await server.serve_forever()


async def handle_connection(reader: StreamReader, writer: StreamWriter,
                            mode: str = "inline") -> None:
    """Serve one client until HTTP says to close, the client leaves, or the task is cancelled."""
    owed: list[int] = []  # yield mode: milliseconds of /compute still to spend
    # In yield mode the app only records what /compute owes; the loop below
    # pays it in slices.  Discussion: HTTPConnection calls its app
    # synchronously, and a synchronous function cannot give the loop back
    # halfway; an async app needs an HTTP layer that hands requests out one
    # at a time (h11's next_event), which Part III's protocols build.
    app = functools.partial(hello_app, compute=owed.append) if mode == "yield" else hello_app
    http = HTTPConnection(app=app)
    try:
        while not http.should_close:
            data = await reader.read(READ_SIZE)  # b"" at end of stream
            if mode == "thread":
                response = await run_in_executor(None, http.receive_data, data)
            else:
                response = http.receive_data(data)
            while owed:
                await compute_cooperatively(owed.pop(0))
            if response:
                writer.write(response)
                await writer.drain()
    except ConnectionError:
        writer.abort()  # reset, broken pipe, or closed under us: nobody to answer
    finally:
        writer.close()


async def compute_cooperatively(milliseconds: float, slice_ms: float = SLICE_MS) -> None:
    """Spend ``milliseconds`` of CPU in ``slice_ms`` slices, other tasks running between."""
    remaining = milliseconds
    while remaining > 0:
        burn_cpu(min(slice_ms, remaining))
        remaining -= slice_ms
        await sleep(0)  # one bare yield: every task ready now runs before our next slice
