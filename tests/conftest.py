"""Shared test setup.

The exercise checker runs these tests with ``TINYLOOP_OVERRIDE`` naming a
student's file; applying it here, before any test module imports tinyloop's
stage modules, makes the in-process tests use the student's code too (the
servers the tests start apply it themselves, in ``stages.load``).
"""

from __future__ import annotations

import tinyloop._override

tinyloop._override.apply_override()

import socket  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair of non-blocking sockets (socketpair(2)), closed after the test."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()
