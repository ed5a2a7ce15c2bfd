# benchmarks/peers/stall_server.py
"""A server that stops answering, the harness's test of its own time-outs: it serves its first
``--serve N`` connections (default 1, the harness's warm-up), then reads requests and never answers,
as a wedged server would; a load on it must end in a "timeout" row.  Only the tests ask for it.

    python benchmarks/peers/stall_server.py [--serve N] --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from tinyloop.http import HTTPConnection
from tinyloop.serving import announce, listen, log


class StallProtocol(asyncio.Protocol):
    to_serve = 1  # connections still to be served, shared by all of them

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.http = HTTPConnection()
        self.served = StallProtocol.to_serve > 0
        StallProtocol.to_serve -= 1

    def data_received(self, data: bytes) -> None:
        if not self.served:
            return  # read and drop: the client waits for ever
        out = self.http.receive_data(data)
        if out:
            self.transport.write(out)
        if self.http.should_close:
            self.transport.close()


async def serve(connections: int, port: int) -> None:
    StallProtocol.to_serve = connections
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    sock = listen("127.0.0.1", port)
    async with await loop.create_server(StallProtocol, sock=sock):
        announce("stall", sock)
        await stop.wait()
    log("stall: stopped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", type=int, default=1, help="connections served before it stalls")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    asyncio.run(serve(args.serve, args.port))


if __name__ == "__main__":
    main()
