# benchmarks/peers/echo_server.py
"""The echo benchmark's Python servers: one TCP echo program, an ``asyncio.Protocol`` or
``start_server`` streams (``--api``), on any loop of LOOPS (``--loop``; a new loop is one row), so
only the loop and the API differ between rows.  Public asyncio API only; backpressure both ways (the
Protocol stops reading above the high-water mark, the streams handler awaits drain()).

    python benchmarks/peers/echo_server.py --loop aio --api protocol --port 0

It prints the announce line (``echo-LOOP-API``) when it listens and stops on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal
from collections.abc import Callable

from tinyloop.serving import announce, listen, log

__all__ = ["APIS", "LOOPS", "EchoProtocol", "echo_stream", "loop_factory", "main", "stop_event"]

# Loop name -> "module:function" returning a new event loop.
LOOPS: dict[str, str] = {
    "asyncio": "asyncio:new_event_loop",
    "uvloop": "uvloop:new_event_loop",
    "rloop": "rloop:new_event_loop",
    "aio": "tinyloop.aio:new_event_loop",
    "uv": "tinyloop.uv:new_event_loop",
    "ring": "tinyloop.ring:new_event_loop",  # Part VI: a proactor on io_uring
}
APIS = ("protocol", "streams")
READ_SIZE = 65536  # bytes the streams handler asks for per read, as the Go and Node peers


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The factory LOOPS names for ``name``; raises ImportError when its module is missing."""
    module, _, function = LOOPS[name].partition(":")
    return getattr(importlib.import_module(module), function)


class EchoProtocol(asyncio.Protocol):
    """Write back every chunk as it arrives."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)

    def pause_writing(self) -> None:
        # The client is not reading its echo: read no more from it.
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.transport.resume_reading()


async def echo_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection as a coroutine: read a chunk, write it back, drain, until end of file."""
    try:
        while data := await reader.read(READ_SIZE):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass  # the peer reset: nothing left to echo
    finally:
        writer.close()


def stop_event() -> asyncio.Event:
    """An Event the running loop sets on SIGTERM or SIGINT: await it, then shut down (this server's,
    and Part V's apps')."""
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    return stop


async def serve(name: str, api: str, port: int) -> None:
    stop, sock = stop_event(), listen("127.0.0.1", port)
    if api == "protocol":
        server = await asyncio.get_running_loop().create_server(EchoProtocol, sock=sock)
    else:
        server = await asyncio.start_server(echo_stream, sock=sock)
    async with server:  # not serve_forever(): on rloop 0.5.0 it stops listening
        announce(name, server.sockets[0])  # rloop 0.5.0 took ``sock`` over and closed our object
        await stop.wait()
        server.close()
        if hasattr(server, "abort_clients"):  # drop the clients still connected (3.13's, and tinyloop.aio's)
            server.abort_clients()
    log(f"{name}: stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A TCP echo server on any asyncio loop.")
    parser.add_argument("--loop", choices=tuple(LOOPS), default="asyncio")
    parser.add_argument("--api", choices=APIS, default="protocol")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    name = f"echo-{args.loop}-{args.api}"
    try:
        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            runner.run(serve(name, args.api, args.port))
    except KeyboardInterrupt:
        log(f"{name}: stopped")


if __name__ == "__main__":
    main()
