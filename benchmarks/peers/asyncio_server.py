# benchmarks/peers/asyncio_server.py
"""The yardstick every stage is measured against: the aio stages' own HTTP Protocol and streams
handler (tinyloop/aio/server.py) on stdlib asyncio or another loop (uvloop, rloop, uringcore), so
only the loop and the API differ.

    python benchmarks/peers/asyncio_server.py --api protocol|streams --loop asyncio|uvloop|rloop|uringcore --port 0

It prints the announce line when it listens and stops cleanly on SIGTERM or Ctrl-C.  It awaits a
future, not ``Server.serve_forever()``: on rloop 0.5.0 serve_forever() stops listening (after it,
``ss -lt`` shows no listener and a connect is refused).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import signal
from collections.abc import Callable

from tinyloop.aio.server import serve_on
from tinyloop.serving import announce, listen, log


async def serve(name: str, api: str, port: int) -> None:
    """The aio stages' serve_on, on whichever loop runs this; SIGTERM or Ctrl-C stops it."""
    sock = listen("127.0.0.1", port)
    # rloop 0.5.0's create_server takes the socket over and closes our object: announce from a copy.
    shown = sock.dup()
    serving = asyncio.ensure_future(serve_on(sock, api, ready=lambda: (announce(name, shown), shown.close())))
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, serving.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    log(f"{name}: stopped")


def _factory(module: object) -> Callable[[], asyncio.AbstractEventLoop]:
    """The loop module's ``new_event_loop``, or its policy's (uringcore 0.9.1 offers only the policy)."""
    return getattr(module, "new_event_loop", None) or module.EventLoopPolicy().new_event_loop  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=("protocol", "streams"), default="protocol")
    parser.add_argument("--loop", choices=("asyncio", "uvloop", "rloop", "uringcore"), default="asyncio")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    factory = asyncio.new_event_loop if args.loop == "asyncio" else _factory(importlib.import_module(args.loop))
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(f"{args.loop}-{args.api}", args.api, args.port))


if __name__ == "__main__":
    main()
