# tests/test_aio_debug.py
#
# tinyloop.aio's transports in debug mode: each keeps ``_source_traceback``
# (where it was made), and the ResourceWarning for one nobody closed says
# where that was, as uvloop's does.  asyncio's own transports leave this to
# tracemalloc, so it is no row of the conformance suite: these tests run on
# Part III's loop (the uv loop's socket-pair and pipe transports are the
# same classes).
#
# Rules: every transport a test makes is either closed or collected inside
# the test, with the warnings it raises recorded.

from __future__ import annotations

import asyncio
import gc
import os
import socket
import ssl
import warnings
from collections.abc import Iterator

import pytest

import tinyloop.aio


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = tinyloop.aio.new_event_loop()
    loop.set_debug(True)
    yield loop
    loop.close()


async def _make_a_socket_transport(loop: asyncio.AbstractEventLoop,
                                   sock: socket.socket) -> asyncio.BaseTransport:
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=sock)
    return transport


async def _make_a_pipe_transport(loop: asyncio.AbstractEventLoop, pipe) -> asyncio.BaseTransport:
    transport, _ = await loop.connect_read_pipe(asyncio.Protocol, pipe)
    return transport


def _drop(namespace: dict, name: str) -> list[str]:
    """Delete ``namespace[name]`` and collect: the "unclosed transport" warnings raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del namespace[name]
        gc.collect()
    return [str(warning.message) for warning in caught
            if str(warning.message).startswith("unclosed transport")]


def test_an_unclosed_socket_transport_says_where_it_was_made(loop) -> None:
    a, b = socket.socketpair()
    with b:
        transport = loop.run_until_complete(_make_a_socket_transport(loop, a))
        names = [frame.name for frame in transport._source_traceback]
        assert "_make_a_socket_transport" in names and "__init__" not in names
        transport.pause_reading()  # off the selector: only we hold it now
        held = {"transport": transport}
        del transport
        messages = _drop(held, "transport")
    assert len(messages) == 1, messages
    assert messages[0].startswith("unclosed transport <")
    assert "object created at (most recent call last)" in messages[0]
    assert "_make_a_socket_transport" in messages[0]


def test_an_unclosed_pipe_transport_says_where_it_was_made(loop) -> None:
    read_end, write_end = os.pipe()
    pipe = os.fdopen(read_end, "rb", buffering=0)
    try:
        transport = loop.run_until_complete(_make_a_pipe_transport(loop, pipe))
        transport.pause_reading()
        held = {"transport": transport}
        del transport
        messages = _drop(held, "transport")
    finally:
        os.close(write_end)
        pipe.close()
    assert len(messages) == 1, messages
    assert "_make_a_pipe_transport" in messages[0]


def test_outside_debug_mode_a_transport_keeps_no_stack(loop) -> None:
    loop.set_debug(False)
    a, b = socket.socketpair()
    with b:
        transport = loop.run_until_complete(_make_a_socket_transport(loop, a))
        assert transport._source_traceback is None
        transport.close()
        loop.run_until_complete(asyncio.sleep(0))


def _make_a_tls_transport(loop: asyncio.AbstractEventLoop) -> asyncio.BaseTransport:
    from tinyloop.aio import sslproto

    protocol = sslproto.SSLProtocol(loop, asyncio.Protocol(), ssl.create_default_context(),
                                    None, server_hostname="localhost")
    return protocol._app_transport


def test_an_unclosed_tls_transport_says_where_it_was_made(loop) -> None:
    held = {"transport": _make_a_tls_transport(loop)}
    messages = _drop(held, "transport")
    assert len(messages) == 1, messages
    assert "_make_a_tls_transport" in messages[0]
