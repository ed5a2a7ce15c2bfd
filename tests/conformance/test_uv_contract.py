# tests/conformance/test_uv_contract.py
#
# Parts of asyncio's contract that Part IV's C transport and libuv-driven
# iteration must keep as Part III's Python ones do (issue 18's uv items),
# run on every loop: an exception from a Python signal handler, the
# contextvars context protocol callbacks run in (plain TCP and TLS, client
# and accepted sides), create_connection with sock= and with local_addr, and
# sendfile's hold on the transport while it runs.  Sources: the asyncio docs
# ("Event Loop", "Transports and Protocols"), PEP 567 and the signal module
# docs.
#
# Rules: asyncio is the reference row; a ``differs`` mark only where uvloop
# departs from asyncio too, with the reason in KNOWN_DIFFERENCES.md.

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import socket
import ssl
import threading

import pytest

from conformance.conftest import run

PROMPT = 5.0

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


# -- A Python signal handler that raises -----------------------------------------------------

class _Boom(Exception):
    pass


def _raise_boom(signum, frame):
    raise _Boom(signum)


@pytest.mark.differs(loops=("uvloop",), reason="uvloop logs an exception raised by a Python "
                     "signal handler and goes on; asyncio lets it out of run_until_complete")
def test_an_exception_from_a_python_signal_handler_leaves_run_until_complete(loop):
    # signal.signal's handler, not add_signal_handler's: Python runs it in
    # the main thread, and asyncio's select() lets what it raises through.
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")
    previous = signal.signal(signal.SIGUSR1, _raise_boom)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(_Boom):
            loop.run_until_complete(asyncio.sleep(1.5))
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    # The loop is stopped, not broken.
    assert loop.run_until_complete(asyncio.sleep(0, "again")) == "again"


# -- contextvars: protocol callbacks run in the transport's context --------------------------

class _ContextRecorder(asyncio.Protocol):
    """Records request_id at each callback; echoes what it gets if ``echo``."""

    def __init__(self, echo: bool = False):
        self.seen: dict[str, str] = {}
        self.echo = echo
        self.lost = asyncio.get_running_loop().create_future()
        self.got_data = asyncio.get_running_loop().create_future()

    def _note(self, name):
        self.seen.setdefault(name, request_id.get())

    def connection_made(self, transport):
        self._note("connection_made")
        self.transport = transport

    def data_received(self, data):
        self._note("data_received")
        if self.echo:
            self.transport.write(data)
        if not self.got_data.done():
            self.got_data.set_result(data)

    def eof_received(self):
        self._note("eof_received")

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


@pytest.fixture(scope="module")
def tls():
    """(server context, client context) for "localhost", from a CA the test makes (trustme)."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def _in_context(value, coro_function, *args):
    """Run ``coro_function(*args)`` in a task whose context has request_id = value."""
    async def body():
        request_id.set(value)
        return await coro_function(*args)
    return await asyncio.ensure_future(body(), )


def _contexts(tls_on: bool, tls):
    server_ssl, client_ssl = tls if tls_on else (None, None)
    client_kw = {"ssl": client_ssl, "server_hostname": "localhost"} if tls_on else {}
    return server_ssl, client_kw


@pytest.mark.parametrize("tls_on", [False, True], ids=["tcp", "tls"])
def test_a_connections_callbacks_run_in_the_context_create_connection_ran_in(
        loop, listener, tls, tls_on):
    server_ssl, client_kw = _contexts(tls_on, tls)

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ContextRecorder(echo=True), sock=listener,
                                          ssl=server_ssl)

        async def connect():
            return await loop.create_connection(_ContextRecorder, *listener.getsockname(),
                                                **client_kw)

        transport, client = await _in_context("client-1", connect)
        request_id.set("someone else")
        transport.write(b"ping")
        await asyncio.wait_for(client.got_data, PROMPT)
        server.close()
        for accepted in list(getattr(server, "_transports", []) or []):
            accepted.close()
        transport.close()
        await asyncio.wait_for(client.lost, PROMPT)
        await server.wait_closed()
        return client.seen

    seen = run(loop, main())
    assert seen["connection_made"] == "client-1"
    assert seen["data_received"] == "client-1"


@pytest.mark.parametrize("tls_on", [False, True], ids=["tcp", "tls"])
def test_an_accepted_connections_callbacks_run_in_the_context_create_server_ran_in(
        loop, listener, tls, tls_on):
    server_ssl, client_kw = _contexts(tls_on, tls)

    async def main():
        loop = asyncio.get_running_loop()
        accepted = []

        def factory():
            accepted.append(_ContextRecorder())
            return accepted[-1]

        async def serve():
            return await loop.create_server(factory, sock=listener, ssl=server_ssl)

        server = await _in_context("server-ctx", serve)

        async def client():
            reader, writer = await asyncio.open_connection(*listener.getsockname(), **client_kw)
            writer.write(b"hello")
            await writer.drain()
            for _ in range(500):
                if accepted and accepted[0].got_data.done():
                    break
                await asyncio.sleep(0.01)
            if writer.can_write_eof():
                writer.write_eof()
            await asyncio.sleep(0.05)
            writer.close()

        await _in_context("client-ctx", client)
        await asyncio.wait_for(accepted[0].lost, PROMPT)
        server.close()
        await server.wait_closed()
        return accepted[0].seen

    seen = run(loop, main())
    assert seen["connection_made"] == "server-ctx"
    assert seen["data_received"] == "server-ctx"
    if "eof_received" in seen:
        assert seen["eof_received"] == "server-ctx"


# -- create_connection with sock= and with local_addr ------------------------------------------

def test_create_connection_with_a_connected_socket(loop, listener):
    sock = socket.create_connection(listener.getsockname())   # blocking, connected
    sockname = sock.getsockname()

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ContextRecorder(echo=True), sock=listener)
        transport, client = await loop.create_connection(_ContextRecorder, sock=sock)
        assert not sock.getblocking(), "the loop makes the socket non-blocking"
        assert transport.get_extra_info("sockname") == sockname
        assert transport.get_extra_info("peername") == listener.getsockname()
        transport.write(b"via sock")
        assert await asyncio.wait_for(client.got_data, PROMPT) == b"via sock"
        transport.close()
        await asyncio.wait_for(client.lost, PROMPT)
        assert sock.fileno() == -1, "closing the transport closes the socket"
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_create_connection_with_sock_and_a_host_is_refused(loop, listener):
    sock = socket.create_connection(listener.getsockname())

    async def main():
        try:
            with pytest.raises(ValueError) as caught:
                await asyncio.get_running_loop().create_connection(
                    asyncio.Protocol, "127.0.0.1", 1, sock=sock)
            assert str(caught.value) == "host/port and sock can not be specified at the same time"
        finally:
            sock.close()

    run(loop, main())


def test_create_connection_with_a_udp_socket_is_refused(loop):
    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            with pytest.raises(ValueError, match="A Stream Socket was expected"):
                await asyncio.get_running_loop().create_connection(asyncio.Protocol, sock=sock)
        finally:
            sock.close()

    run(loop, main())


def test_create_connection_with_local_addr_binds_there(loop, listener):
    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ContextRecorder(echo=True), sock=listener)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()
        probe.close()
        transport, client = await loop.create_connection(
            _ContextRecorder, *listener.getsockname(), local_addr=local)
        assert transport.get_extra_info("sockname") == local
        transport.write(b"from local")
        assert await asyncio.wait_for(client.got_data, PROMPT) == b"from local"
        transport.close()
        await asyncio.wait_for(client.lost, PROMPT)
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_create_connection_with_a_local_addr_in_use_raises_oserror(loop, listener):
    async def main():
        with pytest.raises(OSError) as caught:
            await asyncio.get_running_loop().create_connection(
                asyncio.Protocol, *listener.getsockname(), local_addr=listener.getsockname())
        assert caught.value.errno is not None

    run(loop, main())


# -- sendfile holds the transport --------------------------------------------------------------

@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no loop.sendfile (NotImplementedError)")
def test_a_write_while_sendfile_runs_is_refused(loop, listener, tmp_path):
    payload = os.urandom(4 << 20)
    path = tmp_path / "payload"
    path.write_bytes(payload)

    async def main():
        loop = asyncio.get_running_loop()
        received = bytearray()
        done = loop.create_future()

        class Sink(asyncio.Protocol):
            def data_received(self, data):
                received.extend(data)
                if len(received) >= len(payload) and not done.done():
                    done.set_result(None)

        server = await loop.create_server(Sink, sock=listener)
        transport, _ = await loop.create_connection(asyncio.Protocol, *listener.getsockname())
        with open(path, "rb") as file:
            sending = asyncio.ensure_future(loop.sendfile(transport, file))
            await asyncio.sleep(0)
            assert not sending.done()
            with pytest.raises(RuntimeError):
                transport.write(b"in the middle")
            assert await asyncio.wait_for(sending, 3 * PROMPT) == len(payload)
        await asyncio.wait_for(done, PROMPT)
        assert bytes(received) == payload, "the file arrived whole, with nothing inside it"
        transport.write(b"after")   # allowed again
        transport.close()
        server.close()
        await server.wait_closed()

    run(loop, main())


@pytest.mark.parametrize("tls_on", [False, True], ids=["tcp", "tls"])
def test_create_connection_with_a_socket_the_loop_connected(loop, listener, tls, tls_on):
    # CPython's test_create_connection_sock: sock_connect (a writer on the
    # descriptor while it connects), then the same socket to create_connection.
    server_ssl, client_kw = _contexts(tls_on, tls)

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ContextRecorder(echo=True), sock=listener,
                                          ssl=server_ssl)
        sock = socket.socket()
        sock.setblocking(False)
        await asyncio.wait_for(loop.sock_connect(sock, listener.getsockname()), PROMPT)
        transport, client = await loop.create_connection(_ContextRecorder, sock=sock, **client_kw)
        transport.write(b"after sock_connect")
        assert await asyncio.wait_for(client.got_data, PROMPT) == b"after sock_connect"
        transport.close()
        await asyncio.wait_for(client.lost, PROMPT)
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_create_connection_with_a_local_addr_of_no_matching_family_raises_oserror(loop, listener):
    async def main():
        with pytest.raises(OSError):
            await asyncio.get_running_loop().create_connection(
                asyncio.Protocol, *listener.getsockname(), local_addr=("::1", 0),
                family=socket.AF_INET)

    run(loop, main())
