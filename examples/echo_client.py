# examples/echo_client.py
"""A TCP echo client: send messages to an echo server and check what comes back.

With words, it sends each as a line and prints the reply; without, it sends
``--count`` messages of ``--size`` bytes on ``--connections`` connections at
once and checks every byte::

    python examples/echo_client.py --loop aio hello world
    python examples/echo_client.py --loop uvloop --count 100 --size 65536 --connections 10

It exits 0 when every echo matched, 1 otherwise (a mismatch, a refused
connection, or no answer within ``--timeout`` seconds).  Start
echo_server.py first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import _loops


async def say(host: str, port: int, words: list[str]) -> None:
    """Send each word as a line; print each reply as it comes back."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for word in words:
            writer.write(word.encode() + b"\n")
            await writer.drain()
            reply = await reader.readline()
            print(reply.decode().rstrip("\n"), flush=True)
    finally:
        writer.close()
        await writer.wait_closed()


async def exchange(host: str, port: int, count: int, size: int) -> int:
    """Send ``count`` messages of ``size`` bytes on one connection, each checked.

    Returns the bytes echoed.  Raises ValueError on a wrong echo and
    asyncio.IncompleteReadError if the server closes early.
    """
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for _ in range(count):
            message = os.urandom(size)
            writer.write(message)
            await writer.drain()
            if await reader.readexactly(size) != message:
                raise ValueError("the echo differs from what was sent")
    finally:
        writer.close()
        await writer.wait_closed()
    return count * size


async def main(args: argparse.Namespace) -> bool:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(args.timeout):
        if args.words:
            await say(args.host, args.port, args.words)
            return True
        start = loop.time()
        sent = await asyncio.gather(*(exchange(args.host, args.port, args.count, args.size)
                                      for _ in range(args.connections)))
        elapsed = loop.time() - start
    print(f"echoed {args.connections * args.count} messages of {args.size} bytes "
          f"({sum(sent)} bytes) on {args.connections} connection(s) in {elapsed:.3f} s "
          f"on {_loops.describe(loop)}", flush=True)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _loops.make_parser(__doc__)
    parser.add_argument("words", nargs="*", help="lines to send, one at a time (default: timed messages)")
    _loops.add_address_options(parser, 8888, serving=False)
    parser.add_argument("--count", type=int, default=10, help="messages per connection (default: 10)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message (default: 1024)")
    parser.add_argument("--connections", type=int, default=1, help="connections at once (default: 1)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole run (default: 30)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    try:
        ok = _loops.run(lambda: main(args), args.loop)
    except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError) as exc:
        print(f"echo client failed: {exc!r}", file=sys.stderr)
        sys.exit(1)
    sys.exit(0 if ok else 1)
