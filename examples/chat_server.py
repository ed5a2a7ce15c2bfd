# examples/chat_server.py
"""A chat server: every line a client sends goes to every other client.

Run it, then connect two or more terminals with ``nc 127.0.0.1 8889``::

    python examples/chat_server.py --loop aio       # or asyncio, uvloop

A client is greeted with its name (``guest-1``, ``guest-2``...), may pick
another with ``/nick NAME``, and sees the others join, speak and leave.  It
serves until Ctrl-C or SIGTERM, and then says goodbye to everyone.

Discussion: a broadcast must not let one slow client hold up the room.  So
each client has its own outbox (an asyncio.Queue of lines) and its own
writer task that drains it; the sender only puts a line in each outbox,
which never waits.  A client whose outbox fills up (it has stopped reading)
is disconnected instead of making the server buffer without bound.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys

import _loops

MAX_LINE = 4096      # bytes in one chat line; longer lines disconnect the client
OUTBOX_LINES = 1000  # lines waiting for a client that does not read, before it is dropped


class Client:
    """One connected client: its name, its outbox, and the task that writes it out."""

    def __init__(self, name: str, writer: asyncio.StreamWriter) -> None:
        self.name = name
        self.writer = writer
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue(OUTBOX_LINES)
        self.sender = asyncio.create_task(self._send_all())

    def send(self, line: str) -> bool:
        """Queue ``line`` for this client; False when its outbox is full (it stopped reading)."""
        try:
            self.outbox.put_nowait(line.encode() + b"\n")
        except asyncio.QueueFull:
            return False
        return True

    async def _send_all(self) -> None:
        while (data := await self.outbox.get()) is not None:
            self.writer.write(data)
            await self.writer.drain()

    async def close(self) -> None:
        """Send what is queued, then close the connection."""
        try:
            self.outbox.put_nowait(None)
        except asyncio.QueueFull:
            self.sender.cancel()
        try:
            await asyncio.wait_for(self.sender, 5.0)
        except (asyncio.CancelledError, TimeoutError, ConnectionError):
            pass
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


class Room:
    """Everyone connected, by name."""

    def __init__(self) -> None:
        self.clients: dict[str, Client] = {}
        self.numbers = itertools.count(1)

    def broadcast(self, line: str, *, sender: Client | None = None) -> None:
        """Give ``line`` to every client but ``sender``; drop the ones that stopped reading."""
        for client in list(self.clients.values()):
            if client is not sender and not client.send(line):
                print(f"{client.name} stopped reading: disconnected", flush=True)
                client.writer.transport.abort()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client from hello to goodbye."""
        client = Client(f"guest-{next(self.numbers)}", writer)
        self.clients[client.name] = client
        client.send(f"welcome, you are {client.name} ({len(self.clients)} here; /nick NAME to rename)")
        self.broadcast(f"* {client.name} joined", sender=client)
        try:
            while line := await reader.readline():
                text = line.decode(errors="replace").rstrip("\r\n")
                if text.startswith("/nick "):
                    self.rename(client, text[6:].strip())
                elif text:
                    self.broadcast(f"{client.name}: {text}", sender=client)
        except (ConnectionError, ValueError):  # reset, or a line longer than MAX_LINE
            pass
        finally:
            del self.clients[client.name]
            self.broadcast(f"* {client.name} left")
            await client.close()

    def rename(self, client: Client, name: str) -> None:
        if not name or " " in name or name in self.clients:
            client.send(f"* cannot take the name {name!r}")
            return
        old, client.name = client.name, name
        self.clients[name] = self.clients.pop(old)
        self.broadcast(f"* {old} is now {name}")

    async def goodbye(self) -> None:
        for client in list(self.clients.values()):
            client.send("* the server is shutting down")
        await asyncio.gather(*(client.close() for client in list(self.clients.values())))


async def main(host: str, port: int) -> None:
    room = Room()
    server = await asyncio.start_server(room.serve, host, port, limit=MAX_LINE)
    address = server.sockets[0].getsockname()
    print(f"chat server on {_loops.describe(asyncio.get_running_loop())}", flush=True)
    print(f"listening on {address[0]}:{address[1]}", flush=True)
    try:
        await asyncio.Event().wait()  # serve (start_server started it) until Ctrl-C or SIGTERM
    finally:
        # Discussion: serve_forever() and ``async with server`` would both
        # wait, once stopped, for every client to leave (Python 3.12+, and
        # tinyloop.aio on every Python) before our goodbye could run.  So the
        # clients are sent away first, then the server waits for them.
        server.close()
        await room.goodbye()
        await server.wait_closed()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _loops.make_parser(__doc__)
    _loops.add_address_options(parser, 8889)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    _loops.run(lambda: main(args.host, args.port), args.loop)
    sys.exit(0)
