"""The ``uv-streams`` stage's module (a stage module exposes ``serve``)."""

from __future__ import annotations

from tinyloop.uv.server import serve_streams as serve

__all__ = ["serve"]
