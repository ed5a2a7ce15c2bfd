"""The ``aio`` stage: the book's HTTP server as an asyncio Protocol, on
tinyloop.aio's loop.  Not a mirror of a CPython file: this is the program
that runs on the loop, and it is the same code the benchmark's asyncio and
uvloop peers run (benchmarks/peers/asyncio_server.py imports it), so that
between those rows only the loop changes.

  HTTPProtocol    asyncio.Protocol callbacks: data_received -> write
  handle_stream   the same server as a coroutine per connection on
                  asyncio's streams (start_server): read, write, drain
                  (the ``aio-streams`` stage, tinyloop/aio/streams_server.py)

Rules this file keeps:
  * Written against asyncio's public API only: nothing here knows which
    loop runs it.
  * Backpressure both ways.  The Protocol stops reading while the
    transport's write buffer is above its high-water mark (pause_writing)
    and starts again below the low-water mark (resume_writing); the
    streams handler gets the same from ``await writer.drain()``.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

from tinyloop.http import HTTPConnection
from tinyloop.serving import BACKLOG

__all__ = ["HTTPProtocol", "handle_stream", "run_stage", "serve", "serve_on"]


class HTTPProtocol(asyncio.Protocol):
    """One HTTP connection, driven by the transport's callbacks."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.http = HTTPConnection()

    def data_received(self, data: bytes) -> None:
        self._send(self.http.receive_data(data))

    def eof_received(self) -> bool:
        self._send(self.http.receive_data(b""))
        return False  # let the transport close once its buffer is flushed

    def pause_writing(self) -> None:
        # The client is not reading its answers: read no more requests from it.
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.transport.resume_reading()

    def _send(self, out: bytes) -> None:
        if out:
            self.transport.write(out)
        if self.http.should_close:
            self.transport.close()  # sends what write() buffered, then closes


async def handle_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection as a coroutine: read, answer, drain, until the HTTP layer says close."""
    http = HTTPConnection()
    try:
        while not http.should_close:
            data = await reader.read(65536)
            out = http.receive_data(data)
            if out:
                writer.write(out)
                await writer.drain()
            if not data:
                break
    except ConnectionError:
        pass  # the peer reset: nothing to answer
    finally:
        writer.close()


async def serve_on(listener: socket.socket, api: str = "protocol",
                   ready: Callable[[], object] | None = None) -> None:
    """Serve HTTP on the listening socket until cancelled; then drop every client.

    ``api`` is ``"protocol"`` (HTTPProtocol) or ``"streams"`` (handle_stream).
    ``ready()`` is called once the server accepts.  Works on any asyncio loop.
    """
    # create_server listens again, with its own backlog (default 100): keep ours.
    if api == "protocol":
        server = await asyncio.get_running_loop().create_server(HTTPProtocol, sock=listener,
                                                                backlog=BACKLOG)
    else:
        server = await asyncio.start_server(handle_stream, sock=listener, backlog=BACKLOG)
    async with server:  # on the way out: close, then wait for the clients to go
        if ready is not None:
            ready()
        try:
            await asyncio.get_running_loop().create_future()  # until cancelled
        finally:
            server.close()
            # asyncio's Server has abort_clients from 3.13; ours on every Python.
            abort_clients = getattr(server, "abort_clients", None)
            if abort_clients is not None:
                abort_clients()


def run_stage(listener: socket.socket, api: str,
              loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
    """Run :func:`serve_on` until SIGTERM or Ctrl-C; then raise KeyboardInterrupt.

    ``loop_factory`` makes the loop (default tinyloop.aio.new_event_loop;
    Part IV passes tinyloop.uv's).

    Discussion: the command line turns SIGTERM into a KeyboardInterrupt
    raised wherever the main thread is (tinyloop.serving.stop_on_sigterm),
    which suits the loops that block in one system call.  Here it could land
    inside a callback, and the callback would be lost half-run: a transport
    that never reports connection_lost, a server whose wait_closed() then
    never returns.  So while the loop runs, SIGTERM goes through the loop
    (add_signal_handler) and cancels the main task between two callbacks,
    which is what asyncio's Runner does for Ctrl-C.
    """
    if loop_factory is None:
        from tinyloop.aio import new_event_loop as loop_factory

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
        await serve_on(listener, api)

    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt("SIGTERM") from None  # the command line's clean stop


def serve(listener: socket.socket) -> None:
    """The ``aio`` stage: HTTPProtocol on tinyloop.aio until KeyboardInterrupt (or SIGTERM)."""
    run_stage(listener, "protocol")
