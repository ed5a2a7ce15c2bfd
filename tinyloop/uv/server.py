"""The ``uv`` and ``uv-streams`` stages: Part III's HTTP server, unchanged, on
Part IV's loop.  Only the loop factory differs from tinyloop/aio/server.py,
so every difference between the two stages' rows in the benchmark table
is the loop's.
"""

from __future__ import annotations

import socket

from tinyloop.aio.server import run_stage
from tinyloop.uv.loop import new_event_loop  # raises ImportError, saying what to install

__all__ = ["serve", "serve_streams"]


def serve(listener: socket.socket) -> None:
    """The ``uv`` stage: HTTPProtocol on tinyloop.uv until KeyboardInterrupt (or SIGTERM)."""
    run_stage(listener, "protocol", new_event_loop)


def serve_streams(listener: socket.socket) -> None:
    """The ``uv-streams`` stage: asyncio streams on tinyloop.uv, as ``aio-streams``."""
    run_stage(listener, "streams", new_event_loop)
