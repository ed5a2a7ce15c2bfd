# benchmarks/peers/stall_server.py
"""A server that stops answering, the harness's test of its own time-outs: it serves its first
connection (the harness's warm-up), then reads requests and never answers, as a wedged server
would; a load on it must end in a "timeout" row.  Only the tests ask for it.

    python benchmarks/peers/stall_server.py --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from tinyloop.http import HTTPConnection
from tinyloop.serving import announce, listen, log


class StallProtocol(asyncio.Protocol):
    """HTTP on the first connection; on every later one, requests read and dropped."""

    first = True  # shared by every connection: whether the next one is the first

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.http = HTTPConnection() if StallProtocol.first else None
        StallProtocol.first = False

    def data_received(self, data: bytes) -> None:
        if self.http is None:
            return  # read and drop: the client waits for ever
        self.transport.write(self.http.receive_data(data))
        if self.http.should_close:
            self.transport.close()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    sock = listen("127.0.0.1", port)
    async with await loop.create_server(StallProtocol, sock=sock):
        announce("stall", sock)
        await stop.wait()
    log("stall: stopped")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    asyncio.run(serve(parser.parse_args().port))
