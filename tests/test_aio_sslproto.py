# tests/test_aio_sslproto.py
#
# TLS as a protocol over a plain transport (tinyloop/aio/sslproto.py), on
# every loop in LOOP_FACTORIES: stdlib asyncio, uvloop, tinyloop.aio and
# tinyloop.uv (whose TLS is Part III's sslproto over its uv_tcp transport).
#
# Rules this file keeps:
#   * Every test takes ``loop_factory`` and runs once per loop; adding a loop
#     is one line in LOOP_FACTORIES (a factory may skip).  A test that fails
#     on asyncio is a wrong test.
#   * ``run()`` is the leak check: a fresh loop per test, and afterwards no
#     ResourceWarning, no file descriptor left open (/proc/self/fd), and no
#     call to the loop's exception handler unless the test expects one.
#   * Everything runs inside ``asyncio.wait_for(..., TEST_TIMEOUT)``, over
#     127.0.0.1, with certificates trustme makes for the run.
#   * The peers are our SSLProtocol on both ends, the loop's own TLS
#     (``asyncio.start_server(ssl=...)``, ``open_connection(ssl=...)``,
#     ``loop.start_tls``), and blocking ``ssl.SSLSocket`` in a thread, which
#     tells a close_notify (``recv`` returns b"") from a bare EOF
#     (SSLEOFError).

from __future__ import annotations

import asyncio
import gc
import os
import socket
import ssl
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tinyloop.aio.sslproto import SSLHandshakeTimeoutError, SSLProtocol

trustme = pytest.importorskip("trustme")

pytestmark = pytest.mark.timeout(60)

# Seconds any one test may run on its loop before it fails.
TEST_TIMEOUT = 20.0


def _uvloop() -> asyncio.AbstractEventLoop:
    uvloop = pytest.importorskip("uvloop")
    return uvloop.new_event_loop()


def _tinyloop_aio() -> asyncio.AbstractEventLoop:
    aio = pytest.importorskip("tinyloop.aio")
    try:
        new_event_loop = aio.new_event_loop
    except AttributeError:
        pytest.skip("tinyloop.aio has no new_event_loop yet")
    return new_event_loop()


def _tinyloop_uv() -> asyncio.AbstractEventLoop:
    from tinyloop import stages

    why = stages.get("uv").unavailable()
    if why:
        pytest.skip(f"uv: {why}")
    import tinyloop.uv
    return tinyloop.uv.new_event_loop()


# The loops every test runs on: (name, factory).  A factory may skip.
LOOP_FACTORIES: list[tuple[str, Callable[[], asyncio.AbstractEventLoop]]] = [
    ("asyncio", asyncio.new_event_loop),
    ("uvloop", _uvloop),
    ("tinyloop.aio", _tinyloop_aio),
    ("tinyloop.uv", _tinyloop_uv),
]


@pytest.fixture(params=[factory for _, factory in LOOP_FACTORIES],
                ids=[name for name, _ in LOOP_FACTORIES])
def loop_factory(request: pytest.FixtureRequest) -> Callable[[], asyncio.AbstractEventLoop]:
    return request.param


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_cert(ca: Any) -> Any:
    return ca.issue_cert("localhost", "127.0.0.1")


@pytest.fixture
def server_ctx(server_cert: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(ctx)
    return ctx


@pytest.fixture
def client_ctx(ca: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


# -- The harness ---------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def run(loop_factory: Callable[[], asyncio.AbstractEventLoop],
        main: Callable[[asyncio.AbstractEventLoop], Awaitable[object]], *,
        errors_expected: bool = False) -> list[dict[str, Any]]:
    """Run ``main(loop)`` on a fresh loop, bounded by TEST_TIMEOUT seconds.

    Returns the contexts the loop's exception handler received; asserts
    there were none unless ``errors_expected``, and that the run left no
    ResourceWarning and no open file descriptor behind.
    """
    loop_factory().close()  # uvloop's first loop opens two descriptors for good
    gc.collect()
    fds = _open_fds()
    errors: list[dict[str, Any]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        loop = loop_factory()
        loop.set_exception_handler(lambda loop, context: errors.append(context))
        try:
            loop.run_until_complete(asyncio.wait_for(main(loop), TEST_TIMEOUT))
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
        del loop
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    if not errors_expected:
        assert errors == []
    assert _open_fds() == fds
    return errors


class App(asyncio.Protocol):
    """An app protocol that records what its transport tells it.

    ``echo`` writes back what it receives, pausing its reading while its
    own writing is paused (flow control both ways).  ``paused_reading``
    pauses reading as soon as it is connected.
    """

    def __init__(self, *, echo: bool = False, paused_reading: bool = False) -> None:
        self.echo = echo
        self.paused_reading = paused_reading
        self.transport: Any = None
        self.received = bytearray()
        self.events: list[str] = []
        self.writing_paused = False
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters: list[asyncio.Future] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.events.append("made")
        if self.paused_reading:
            transport.pause_reading()
        self._wake()

    def data_received(self, data: bytes) -> None:
        self.received += data
        if self.echo:
            self.transport.write(data)
        self._wake()

    def eof_received(self) -> None:
        self.events.append("eof")
        self._wake()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)
        self._wake()

    def pause_writing(self) -> None:
        self.events.append("pause_writing")
        self.writing_paused = True
        if self.echo:
            self.transport.pause_reading()
        self._wake()

    def resume_writing(self) -> None:
        self.events.append("resume_writing")
        self.writing_paused = False
        if self.echo:
            self.transport.resume_reading()
        self._wake()

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds; it is checked after every event."""
        while not predicate():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    async def send(self, payload: bytes, chunk: int = 64 * 1024) -> None:
        """Write ``payload`` piece by piece, waiting whenever writing is paused."""
        for start in range(0, len(payload), chunk):
            await self.until(lambda: not self.writing_paused)
            self.transport.write(payload[start:start + chunk])

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class BufferedApp(App, asyncio.BufferedProtocol):
    """App as a BufferedProtocol, with a small buffer so a record takes several reads."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.buffer = bytearray(1000)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self.buffer[:nbytes]))


class TracedSSLProtocol(SSLProtocol):
    """SSLProtocol that also says when its plain transport is gone (``plain_lost``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *args: Any, **kwargs: Any) -> None:
        super().__init__(loop, *args, **kwargs)
        self.plain_lost = loop.create_future()

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self.plain_lost.set_result(exc)


class Server:
    """Our SSLProtocol behind ``loop.create_server``; one (protocol, app, waiter) per client."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ctx: ssl.SSLContext,
                 app_factory: Callable[[], App], **kwargs: Any) -> None:
        self.loop, self.ctx, self.app_factory, self.kwargs = loop, ctx, app_factory, kwargs
        self.connections: list[tuple[TracedSSLProtocol, App, asyncio.Future]] = []

    def _protocol(self) -> TracedSSLProtocol:
        app, waiter = self.app_factory(), self.loop.create_future()
        protocol = TracedSSLProtocol(self.loop, app, self.ctx, waiter, server_side=True, **self.kwargs)
        self.connections.append((protocol, app, waiter))
        return protocol

    async def __aenter__(self) -> Server:
        self.server = await self.loop.create_server(self._protocol, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, exc_type: Any, *exc_info: object) -> None:
        self.server.close()
        await self.server.wait_closed()
        for protocol, _, waiter in self.connections:
            # The test failed: end what it left open (an ended connection has
            # let go of its app transport).
            if exc_type is not None and protocol._app_transport is not None:
                protocol._app_transport.abort()
            await protocol.plain_lost
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # seen: no "exception was never retrieved"

    async def connection(self, index: int = 0) -> tuple[TracedSSLProtocol, App, asyncio.Future]:
        while len(self.connections) <= index:
            await asyncio.sleep(0.005)
        return self.connections[index]

    async def pair(self, client_ctx: ssl.SSLContext, client: App | None = None,
                   **kwargs: Any) -> tuple[App, App, TracedSSLProtocol]:
        """Connect our client: (client app, server app, client SSLProtocol), both handshakes done."""
        client = App() if client is None else client
        protocol = await connect(self.loop, self.port, client_ctx, client, **kwargs)
        _, server_app, _ = self.connections[-1]
        await server_app.until(lambda: server_app.transport is not None)
        return client, server_app, protocol


async def connect(loop: asyncio.AbstractEventLoop, port: int, ctx: ssl.SSLContext, app: App,
                  server_hostname: str | None = "localhost", **kwargs: Any) -> TracedSSLProtocol:
    """Our SSLProtocol as a client; returns once the handshake is done (or raises its error)."""
    waiter = loop.create_future()
    protocol = TracedSSLProtocol(loop, app, ctx, waiter, server_hostname=server_hostname, **kwargs)
    await loop.create_connection(lambda: protocol, "127.0.0.1", port)
    try:
        await waiter
    except BaseException:
        await protocol.plain_lost
        raise
    return protocol


PAYLOAD = bytes(range(256)) * (16 * 1024)  # 4 MiB


# -- Echo, both sides ours -----------------------------------------------------


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3],
                         ids=["TLSv1.2", "TLSv1.3"])
@pytest.mark.parametrize("size", [5, 2 * 1024 * 1024], ids=["5B", "2MiB"])
def test_echo_through_tls_both_sides_ours(loop_factory, server_ctx, client_ctx, size, version):
    """In TLS 1.3 the client finishes its handshake first, in TLS 1.2 the server."""
    payload = PAYLOAD[:size]
    client_ctx.maximum_version = version

    async def main(loop):
        async with Server(loop, server_ctx, lambda: App(echo=True)) as server:
            client, server_app, _ = await server.pair(client_ctx)
            assert client.transport.get_extra_info("ssl_object").version() == "TLSv1." + version.name[-1]
            await client.send(payload)
            await client.until(lambda: len(client.received) >= size)
            assert client.received == payload
            client.transport.close()
            assert await client.lost is None
            assert await server_app.lost is None
            assert client.events[0] == "made" and client.events[-1] == "lost"
            assert "eof" not in client.events  # we closed first: nothing after close()
            assert server_app.events[0] == "made" and server_app.events[-2:] == ["eof", "lost"]

    run(loop_factory, main)


@pytest.mark.parametrize("buffered_side", ["client", "server"])
def test_buffered_protocol_app(loop_factory, server_ctx, client_ctx, buffered_side):
    payload = PAYLOAD[:300_000]
    server_kind = BufferedApp if buffered_side == "server" else App
    client_kind = BufferedApp if buffered_side == "client" else App

    async def main(loop):
        async with Server(loop, server_ctx, lambda: server_kind(echo=True)) as server:
            client, _, _ = await server.pair(client_ctx, client_kind())
            await client.send(payload)
            await client.until(lambda: len(client.received) >= len(payload))
            assert client.received == payload
            client.transport.close()
            assert await client.lost is None

    run(loop_factory, main)


def test_writes_before_the_handshake_wait_for_it(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, lambda: App(echo=True)) as server:
            client, waiter = App(), loop.create_future()
            protocol = TracedSSLProtocol(loop, client, client_ctx, waiter, server_hostname="localhost")
            protocol._app_transport.write(b"early ")
            assert protocol._app_transport.get_write_buffer_size() == 6
            await loop.create_connection(lambda: protocol, "127.0.0.1", server.port)
            await waiter
            client.transport.write(b"late")
            await client.until(lambda: len(client.received) >= 10)
            assert client.received == b"early late"
            client.transport.close()
            await client.lost

    run(loop_factory, main)


# -- Flow control ---------------------------------------------------------------


@pytest.mark.parametrize("writer_side", ["client", "server"])
def test_backpressure_reaches_the_writer_while_the_reader_is_paused(
        loop_factory, server_ctx, client_ctx, writer_side):
    """The reader pauses reading; the writer's app gets pause_writing, then everything."""

    async def main(loop):
        def server_app() -> App:
            return App() if writer_side == "server" else App(paused_reading=True)

        async with Server(loop, server_ctx, server_app) as server:
            client, server_side_app, _ = await server.pair(
                client_ctx, App(paused_reading=writer_side == "server"))
            writer, reader = ((client, server_side_app) if writer_side == "client"
                              else (server_side_app, client))
            for app in (writer, reader):  # small kernel buffers: the pause comes sooner
                sock = app.transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
            writer.transport.set_write_buffer_limits(high=32 * 1024)
            assert writer.transport.get_write_buffer_limits() == (8 * 1024, 32 * 1024)

            sending = asyncio.ensure_future(writer.send(PAYLOAD))
            await writer.until(lambda: writer.writing_paused)
            assert writer.transport.get_write_buffer_size() > 32 * 1024
            assert not reader.transport.is_reading()
            held = len(reader.received)
            await asyncio.sleep(0.2)
            assert len(reader.received) == held < len(PAYLOAD)  # paused means paused
            assert writer.writing_paused  # the reader's socket, too: nothing drains

            reader.transport.resume_reading()
            await sending
            await reader.until(lambda: len(reader.received) >= len(PAYLOAD))
            assert reader.received == PAYLOAD
            assert "pause_writing" in writer.events and "resume_writing" in writer.events
            client.transport.close()
            assert await client.lost is None
            assert await server_side_app.lost is None

    run(loop_factory, main)


def test_data_sent_while_paused_comes_after_resume_reading(loop_factory, server_ctx, client_ctx):
    """Data that arrives while paused is delivered, all of it, after resume_reading."""

    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, _ = await server.pair(client_ctx)
            server_app.transport.pause_reading()
            assert not server_app.transport.is_reading()
            client.transport.write(b"x" * 100_000)
            await asyncio.sleep(0.2)
            assert server_app.received == b""
            server_app.transport.resume_reading()
            assert server_app.transport.is_reading()
            await server_app.until(lambda: len(server_app.received) >= 100_000)
            client.transport.close()
            await client.lost

    run(loop_factory, main)


# -- Handshake failures ------------------------------------------------------------


def test_hostname_mismatch_fails_the_waiter(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client = App()
            with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
                await connect(loop, server.port, client_ctx, client, server_hostname="example.org")
            assert client.events == []
            protocol, server_app, waiter = await server.connection()
            await protocol.plain_lost
            with pytest.raises(ssl.SSLError):  # our alert reached it
                waiter.result()
            assert server_app.events == []

    run(loop_factory, main)


def test_untrusted_certificate_fails_the_waiter(loop_factory, server_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
                await connect(loop, server.port, ssl.create_default_context(), App())

    run(loop_factory, main)


@pytest.mark.parametrize("our_side", ["client", "server"])
def test_handshake_timeout(loop_factory, server_ctx, client_ctx, our_side):
    async def main(loop):
        silent = []  # the peer: connects or accepts, then says nothing

        def silent_peer() -> App:
            silent.append(App())
            return silent[-1]

        started = time.monotonic()
        if our_side == "client":
            server = await loop.create_server(silent_peer, "127.0.0.1", 0)
            with pytest.raises(TimeoutError,
                               match="SSL handshake is taking longer than 0.3 seconds") as info:
                await connect(loop, server.sockets[0].getsockname()[1], client_ctx, App(),
                              ssl_handshake_timeout=0.3)
            assert isinstance(info.value, ConnectionAbortedError)  # what asyncio raises
            server.close()
            await server.wait_closed()
            await silent[0].lost
        else:
            async with Server(loop, server_ctx, App, ssl_handshake_timeout=0.3) as server:
                await loop.create_connection(silent_peer, "127.0.0.1", server.port)
                _, server_app, waiter = await server.connection()
                with pytest.raises(SSLHandshakeTimeoutError):
                    await waiter
                await silent[0].lost
                assert server_app.events == []
        assert time.monotonic() - started < 5

    run(loop_factory, main)


@pytest.mark.parametrize("our_side", ["client", "server"])
def test_peer_closes_during_handshake(loop_factory, server_ctx, client_ctx, our_side):
    class Quitter(App):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            transport.close()

    async def main(loop):
        peers: list[App] = []

        def quitter() -> App:
            peers.append(Quitter())
            return peers[-1]

        if our_side == "client":
            server = await loop.create_server(quitter, "127.0.0.1", 0)
            with pytest.raises(ConnectionResetError):
                await connect(loop, server.sockets[0].getsockname()[1], client_ctx, App())
            server.close()
            await server.wait_closed()
        else:
            async with Server(loop, server_ctx, App) as server:
                await loop.create_connection(quitter, "127.0.0.1", server.port)
                _, server_app, waiter = await server.connection()
                with pytest.raises(ConnectionResetError):
                    await waiter
                assert server_app.events == []
        await peers[0].lost

    run(loop_factory, main)


# -- Closing ---------------------------------------------------------------------------


def _thread_peer(listener: socket.socket | None, port: int, ctx: ssl.SSLContext, server_side: bool,
                 closes_first: bool) -> bytes:
    """A blocking TLS peer for a thread: returns what it read up to our close_notify.

    ``closes_first``: send b"bye", then our close_notify, and wait for the
    other's (unwrap() raises if a bare EOF comes instead).  Otherwise read
    until the other's close_notify (a bare EOF raises SSLEOFError, since
    suppress_ragged_eofs is off), then answer it with ours.
    """
    if server_side:
        sock, _ = listener.accept()  # type: ignore[union-attr]
    else:
        sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(10)
    with ctx.wrap_socket(sock, server_side=server_side, suppress_ragged_eofs=False,
                         server_hostname=None if server_side else "localhost") as tls:
        received = b""
        if closes_first:
            tls.sendall(b"bye")
            tls.unwrap()
        else:
            while chunk := tls.recv(65536):
                received += chunk
            tls.unwrap()
    return received


@pytest.mark.parametrize("our_side", ["client", "server"])
@pytest.mark.parametrize("closer", ["us", "peer"])
def test_graceful_close_sends_and_answers_close_notify(
        loop_factory, server_ctx, client_ctx, our_side, closer):
    async def main(loop):
        app = App()

        async def close_and_check(peer: asyncio.Future) -> None:
            if closer == "us":
                app.transport.write(b"ping")
                app.transport.close()
                app.transport.write(b"dropped")  # after close(): dropped, as asyncio does
                assert await app.lost is None
                assert await peer == b"ping"  # the peer saw our close_notify, not a bare EOF
                assert app.events == ["made", "lost"]
            else:
                assert await app.lost is None
                await peer  # the peer's unwrap() got our close_notify back
                assert app.received == b"bye"
                assert app.events == ["made", "eof", "lost"]

        if our_side == "client":
            with socket.create_server(("127.0.0.1", 0)) as listener:
                listener.settimeout(10)
                port = listener.getsockname()[1]
                peer = loop.run_in_executor(None, _thread_peer, listener, port, server_ctx,
                                            True, closer == "peer")
                await connect(loop, port, client_ctx, app)
                await close_and_check(peer)
        else:
            async with Server(loop, server_ctx, lambda: app) as server:
                peer = loop.run_in_executor(None, _thread_peer, None, server.port, client_ctx,
                                            False, closer == "peer")
                await app.until(lambda: app.transport is not None)
                await close_and_check(peer)

    run(loop_factory, main)


def test_bare_eof_from_the_peer_is_eof_received(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, protocol = await server.pair(client_ctx)
            client.transport.write(b"last words")
            await server_app.until(lambda: server_app.received == b"last words")
            # Read the server's answer first: closing a socket with unread
            # bytes (TLS 1.3's session tickets) sends a reset, not a FIN.
            server_app.transport.write(b"ok")
            await client.until(lambda: client.received == b"ok")
            protocol._transport.close()  # TCP FIN, no close_notify
            assert await server_app.lost is None
            assert server_app.events == ["made", "eof", "lost"]
            assert await client.lost is None

    run(loop_factory, main)


def test_abort(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, _ = await server.pair(client_ctx)
            client.transport.write(b"x" * 1000)
            client.transport.abort()
            assert client.transport.is_closing()
            assert await client.lost is None
            await server_app.lost  # None (a bare EOF) or a reset, depending on timing
            assert server_app.events[-1] == "lost"

    run(loop_factory, main)


def test_close_while_the_peer_is_still_sending(loop_factory, server_ctx, client_ctx):
    """Data crossing our close_notify (OpenSSL refuses it) ends the close quietly."""

    class Talker(App):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            transport.write(PAYLOAD)  # still on its way when the client closes

    async def main(loop):
        async with Server(loop, server_ctx, Talker) as server:
            client, server_app, _ = await server.pair(client_ctx)
            await client.until(lambda: len(client.received) > 0)
            client.transport.close()
            assert await client.lost is None
            exc = await server_app.lost  # a reset, if our socket closed with bytes unread
            assert exc is None or isinstance(exc, ConnectionError), exc

    run(loop_factory, main)


def test_shutdown_timeout_aborts(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, lambda: App(paused_reading=True)) as server:
            client, server_app, _ = await server.pair(client_ctx, ssl_shutdown_timeout=0.3)
            started = time.monotonic()
            client.transport.close()  # the server reads nothing: no close_notify comes back
            exc = await client.lost
            assert isinstance(exc, TimeoutError), exc
            assert 0.25 < time.monotonic() - started < 5
            server_app.transport.close()
            await server_app.lost

    run(loop_factory, main)


def test_abort_cuts_a_close_short(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, lambda: App(paused_reading=True)) as server:
            client, server_app, _ = await server.pair(client_ctx)
            client.transport.close()  # unanswered: it would wait the 30 s shutdown timeout
            await asyncio.sleep(0.05)
            client.transport.abort()
            assert await client.lost is None
            server_app.transport.close()
            await server_app.lost

    run(loop_factory, main)


# -- Errors after the handshake ------------------------------------------------------


def test_app_exception_is_reported_and_ends_the_connection(loop_factory, server_ctx, client_ctx):
    class Faulty(App):
        def data_received(self, data: bytes) -> None:
            raise RuntimeError("boom")

    async def main(loop):
        async with Server(loop, server_ctx, Faulty) as server:
            client, server_app, _ = await server.pair(client_ctx)
            client.transport.write(b"hi")
            exc = await server_app.lost
            assert isinstance(exc, RuntimeError) and str(exc) == "boom"
            await client.lost

    errors = run(loop_factory, main, errors_expected=True)
    assert [type(context["exception"]) for context in errors] == [RuntimeError]
    assert isinstance(errors[0]["protocol"], SSLProtocol)


def test_corrupt_record_is_reported_and_ends_the_connection(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, protocol = await server.pair(client_ctx)
            # An application-data record header and 32 bytes that no key decrypts.
            protocol._transport.write(b"\x17\x03\x03\x00\x20" + bytes(32))
            exc = await server_app.lost
            assert isinstance(exc, ssl.SSLError), exc
            await client.lost

    errors = run(loop_factory, main, errors_expected=True)
    assert [type(context["exception"]) for context in errors] == [ssl.SSLError]


# -- The app transport ------------------------------------------------------------------


def test_get_extra_info(loop_factory, server_ctx, client_ctx):
    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, _ = await server.pair(client_ctx)
            for app, ctx in ((client, client_ctx), (server_app, server_ctx)):
                info = app.transport.get_extra_info
                assert info("sslcontext") is ctx
                assert isinstance(info("ssl_object"), ssl.SSLObject)
                assert info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
                name, version, bits = info("cipher")
                assert isinstance(name, str) and isinstance(bits, int)
                assert info("compression") is None
                assert info("socket") is not None
                assert info("sockname")[0] == info("peername")[0] == "127.0.0.1"
                assert info("no such key", "default") == "default"
            assert dict(client.transport.get_extra_info("peercert")["subjectAltName"]) \
                == {"DNS": "localhost", "IP Address": "127.0.0.1"}
            assert server_app.transport.get_extra_info("peercert") is None  # no client certificate
            assert client.transport.get_protocol() is client
            assert not client.transport.can_write_eof()
            with pytest.raises(NotImplementedError):
                client.transport.write_eof()
            with pytest.raises(TypeError):
                client.transport.write("text")
            client.transport.close()
            await client.lost

    run(loop_factory, main)


def test_sendfile_falls_back_to_writes(loop_factory, server_ctx, client_ctx, tmp_path):
    data = PAYLOAD[:1024 * 1024 + 5]
    (tmp_path / "file").write_bytes(data)

    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, _ = await server.pair(client_ctx)
            with open(tmp_path / "file", "rb") as file:
                try:
                    sent = await loop.sendfile(client.transport, file)
                except (NotImplementedError, RuntimeError) as exc:
                    client.transport.close()
                    await client.lost
                    pytest.skip(f"this loop's sendfile takes no TLS transport: {exc!r}")
            assert sent == len(data)
            await server_app.until(lambda: len(server_app.received) >= len(data))
            assert server_app.received == data
            assert client.transport.get_protocol() is client  # sendfile put it back
            client.transport.close()
            await client.lost

    run(loop_factory, main)


def test_client_certificates(loop_factory, ca, server_ctx, client_ctx):
    """A server that requires a client certificate sees it; one without fails the server's waiter."""
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    ca.configure_trust(server_ctx)
    anonymous_ctx = ssl.create_default_context()
    ca.configure_trust(anonymous_ctx)
    ca.issue_cert("client.example").configure_cert(client_ctx)

    async def main(loop):
        async with Server(loop, server_ctx, App) as server:
            client, server_app, _ = await server.pair(client_ctx)
            peercert = server_app.transport.get_extra_info("peercert")
            assert dict(peercert["subjectAltName"]) == {"DNS": "client.example"}
            client.transport.close()
            await client.lost

            anonymous = App()
            try:  # TLS 1.3: the client's handshake is over before the server says no
                await connect(loop, server.port, anonymous_ctx, anonymous)
            except ssl.SSLError:
                pass
            _, refused, waiter = await server.connection(1)
            with pytest.raises(ssl.SSLError, match="certificate"):
                await waiter
            assert refused.events == []
            if anonymous.events:
                assert isinstance(await anonymous.lost, ssl.SSLError)  # the server's alert

    errors = run(loop_factory, main, errors_expected=True)
    assert all(isinstance(context["exception"], ssl.SSLError) for context in errors)


def test_unclosed_app_transport_warns(loop_factory, client_ctx):
    loop = loop_factory()
    try:
        protocol = SSLProtocol(loop, asyncio.Protocol(), client_ctx, None, server_hostname="localhost")
        with pytest.warns(ResourceWarning, match="unclosed transport"):
            del protocol
            gc.collect()
    finally:
        loop.close()


def test_arguments_are_checked(loop_factory, client_ctx, server_ctx):
    loop = loop_factory()
    try:
        for bad in ({"ssl_handshake_timeout": 0}, {"ssl_shutdown_timeout": -1}):
            with pytest.raises(ValueError, match="positive"):
                SSLProtocol(loop, asyncio.Protocol(), client_ctx, None, **bad)
        with pytest.raises(ValueError, match="server"):
            SSLProtocol(loop, asyncio.Protocol(), None, None, server_side=True)
        with pytest.raises(ValueError, match="server_hostname"):  # check_hostname needs a name
            SSLProtocol(loop, asyncio.Protocol(), client_ctx, None)
        for protocol in (SSLProtocol(loop, asyncio.Protocol(), None, None),
                         SSLProtocol(loop, asyncio.Protocol(), server_ctx, None, server_side=True,
                                     server_hostname="ignored")):
            protocol._app_transport.close()
    finally:
        loop.close()


# -- Interoperation with asyncio's own TLS ----------------------------------------------


def test_our_client_with_asyncio_tls_server(loop_factory, server_ctx, client_ctx):
    payload = PAYLOAD[:1024 * 1024]

    async def main(loop):
        handlers_done = loop.create_future()

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()
            await writer.wait_closed()
            handlers_done.set_result(None)

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        client = App()
        await connect(loop, server.sockets[0].getsockname()[1], client_ctx, client)
        await client.send(payload)
        await client.until(lambda: len(client.received) >= len(payload))
        assert client.received == payload
        client.transport.close()
        assert await client.lost is None
        await handlers_done
        server.close()
        await server.wait_closed()

    run(loop_factory, main)


def test_asyncio_tls_client_with_our_server(loop_factory, server_ctx, client_ctx):
    payload = PAYLOAD[:1024 * 1024]

    async def main(loop):
        async with Server(loop, server_ctx, lambda: App(echo=True)) as server:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client_ctx, server_hostname="localhost")
            writer.write(payload)
            await writer.drain()
            assert await reader.readexactly(len(payload)) == payload
            writer.close()
            await writer.wait_closed()
            _, server_app, _ = await server.connection()
            assert await server_app.lost is None
            assert server_app.events[-2:] == ["eof", "lost"]

    run(loop_factory, main)


async def upgrade(loop: asyncio.AbstractEventLoop, transport: Any, app: App, ctx: ssl.SSLContext,
                  *, server_side: bool) -> TracedSSLProtocol:
    """Put TLS on a connected plain transport, the way loop.start_tls does."""
    waiter = loop.create_future()
    protocol = TracedSSLProtocol(loop, app, ctx, waiter, server_side,
                                 None if server_side else "localhost", call_connection_made=False)
    transport.pause_reading()
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    transport.resume_reading()
    await waiter
    app.transport = protocol._app_transport
    return protocol


@pytest.mark.parametrize("our_side", ["client", "server"])
def test_starttls_against_the_loops_start_tls(loop_factory, server_ctx, client_ctx, our_side):
    """A plaintext STARTTLS exchange, then TLS: one side ours, the other loop.start_tls."""

    class StartTLSServer(App):
        def data_received(self, data: bytes) -> None:
            if self.transport.get_extra_info("sslcontext") is None and data == b"STARTTLS\n":
                self.transport.write(b"OK\n")
                self.upgraded = asyncio.ensure_future(self.start_tls())
            else:
                super().data_received(data)

        async def start_tls(self) -> None:
            loop = asyncio.get_running_loop()
            if our_side == "server":
                await upgrade(loop, self.transport, self, server_ctx, server_side=True)
            else:
                self.transport = await loop.start_tls(self.transport, self, server_ctx,
                                                      server_side=True)

    async def main(loop):
        server_app = StartTLSServer(echo=True)
        server = await loop.create_server(lambda: server_app, "127.0.0.1", 0)
        client = App()
        plain, _ = await loop.create_connection(lambda: client, "127.0.0.1",
                                                server.sockets[0].getsockname()[1])
        plain.write(b"STARTTLS\n")
        await client.until(lambda: client.received == b"OK\n")
        client.received.clear()
        if our_side == "client":
            await upgrade(loop, plain, client, client_ctx, server_side=False)
        else:
            client.transport = await loop.start_tls(plain, client, client_ctx,
                                                    server_hostname="localhost")
        await server_app.upgraded
        assert client.transport.get_extra_info("ssl_object") is not None
        client.transport.write(b"secret")
        await client.until(lambda: client.received == b"secret")
        client.transport.close()
        await client.lost
        await server_app.lost
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
