"""The ``aio-streams`` stage: the same HTTP server as ``aio``, written with
asyncio's streams (a coroutine per connection: read, write, drain) instead
of a Protocol, on tinyloop.aio's loop.  Its row beside ``aio`` prices the
streams layer; its row beside ``coroutines`` prices Part II's streams
against asyncio's, both on transports.
"""

from __future__ import annotations

import socket

from tinyloop.aio.server import run_stage

__all__ = ["serve"]


def serve(listener: socket.socket) -> None:
    """Serve HTTP with asyncio streams on tinyloop.aio until KeyboardInterrupt (or SIGTERM)."""
    run_stage(listener, "streams")
