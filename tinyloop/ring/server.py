"""The ``ring`` stage: Part III's HTTP server, unchanged, on Part VI's proactor
loop.  Only the loop factory differs from tinyloop/aio/server.py (and from
tinyloop/uv/server.py), so every difference between their rows in the
benchmark table is the loop's.
"""

from __future__ import annotations

import socket

from tinyloop.aio.server import run_stage
from tinyloop.ring.loop import new_event_loop, refusal

__all__ = ["serve", "unavailable"]


def unavailable() -> str | None:
    """Why the stage cannot run here, in one line (the stage table asks: tinyloop/stages.py), or None.

    tinyloop.ring's refusal: io_uring refused, or its provided-buffer rings (Linux 5.19).
    """
    return refusal()


def serve(listener: socket.socket) -> None:
    """The ``ring`` stage: HTTPProtocol on tinyloop.ring until KeyboardInterrupt (or SIGTERM)."""
    run_stage(listener, "protocol", new_event_loop)
