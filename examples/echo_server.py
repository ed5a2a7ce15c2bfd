# examples/echo_server.py
"""A TCP echo server: every byte a client sends comes straight back.

Run it, then talk to it with echo_client.py (or ``nc 127.0.0.1 8888``)::

    python examples/echo_server.py --loop aio            # or asyncio, uvloop
    python examples/echo_client.py --loop aio hello world

It serves until Ctrl-C or SIGTERM.  ``--port 0`` takes any free port; the
"listening on" line says which.  Streams (asyncio.start_server) do the work:
read what has arrived, write it back, and ``drain()`` so a client that sends
faster than it reads is slowed down instead of growing our buffer
(backpressure).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import _loops

CHUNK = 64 * 1024  # bytes read at a time
clients: set[asyncio.StreamWriter] = set()  # connected now, closed when the server stops


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Serve one client: echo until it closes its side, then close ours."""
    peer = writer.get_extra_info("peername")
    print(f"{peer[0]}:{peer[1]} connected", flush=True)
    clients.add(writer)
    received = 0
    try:
        while data := await reader.read(CHUNK):
            received += len(data)
            writer.write(data)
            await writer.drain()  # wait while the client is not reading
    except ConnectionError:
        pass  # the client reset the connection: nothing to echo to
    finally:
        clients.discard(writer)
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass
        print(f"{peer[0]}:{peer[1]} left after {received} bytes", flush=True)


async def main(host: str, port: int) -> None:
    server = await asyncio.start_server(echo, host, port)
    address = server.sockets[0].getsockname()
    print(f"echo server on {_loops.describe(asyncio.get_running_loop())}", flush=True)
    print(f"listening on {address[0]}:{address[1]}", flush=True)
    try:
        await asyncio.Event().wait()  # serve (start_server started it) until Ctrl-C or SIGTERM
    finally:
        # Discussion: not ``await server.serve_forever()``.  Cancelled, it
        # closes the server and then waits for every client to leave (Python
        # 3.12+, and tinyloop.aio on every Python), so a client that stays
        # would keep us from ever reaching this block.  We close the
        # listening socket, then the clients' connections (each echo() reads
        # EOF and ends), then wait for them to be gone.
        server.close()
        for writer in list(clients):
            writer.close()
        await server.wait_closed()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _loops.make_parser(__doc__)
    _loops.add_address_options(parser, 8888)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    _loops.run(lambda: main(args.host, args.port), args.loop)
    sys.exit(0)
