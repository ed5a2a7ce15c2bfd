# tests/conformance/test_smoke_tls_unix.py
#
# One smoke test each for the parts of the loop with suites of their own:
# TLS (tests/test_aio_sslproto.py) and Unix sockets, signals, subprocesses
# (tests/test_aio_unix.py).  Here only the question "does the loop have it,
# the way asyncio does" is asked, on every row.
#
# Rules: on a tinyloop row, a feature the loop does not have yet (an import
# that fails, NotImplementedError) skips with a message naming it, rather
# than failing: those suites say how complete it is.  On the asyncio and
# uvloop rows nothing is skipped.

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import sys
import tempfile

import pytest

from conformance.conftest import STAGE_LOOPS, run


async def _feature(loop_name, what, awaitable):
    """Await ``awaitable``; on a tinyloop row, skip if the feature is missing."""
    try:
        return await awaitable
    except (NotImplementedError, ImportError) as exc:
        if loop_name in STAGE_LOOPS:
            pytest.skip(f"{loop_name} has no {what} yet ({type(exc).__name__}: {exc})")
        raise


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


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


def test_tls_echo_with_ssl_on_create_server_and_create_connection(loop, loop_name, tls):
    server_context, client_context = tls

    async def main():
        server = await _feature(loop_name, "TLS (ssl= on create_server)", loop.create_server(
            Echo, "127.0.0.1", 0, ssl=server_context))
        port = server.sockets[0].getsockname()[1]
        reader, writer = await _feature(loop_name, "TLS (ssl= on create_connection)",
                                        asyncio.open_connection("127.0.0.1", port, ssl=client_context,
                                                                server_hostname="localhost"))
        assert writer.get_extra_info("ssl_object") is not None
        writer.write(b"over tls")
        data = await reader.readexactly(8)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return data

    assert run(loop, main()) == b"over tls"


def test_start_tls_upgrades_a_plain_connection(loop, loop_name, tls):
    server_context, client_context = tls

    async def handle(reader, writer):
        await reader.readexactly(8)  # b"STARTTLS"
        writer.write(b"GO")  # the client starts the handshake only after this, so no
        await writer.drain()  # handshake byte can be read as plain text here
        await writer.start_tls(server_context)
        writer.write(await reader.readexactly(6))
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"STARTTLS")
        await writer.drain()
        assert await reader.readexactly(2) == b"GO"
        await _feature(loop_name, "start_tls", writer.start_tls(  # loop.start_tls underneath
            client_context, server_hostname="localhost"))
        writer.write(b"secret")
        data = await reader.readexactly(6)
        writer.close()
        server.close()
        await server.wait_closed()
        return data

    assert run(loop, main()) == b"secret"


@pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets")
def test_unix_socket_echo(loop, loop_name):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "echo.sock")

        async def main():
            server = await _feature(loop_name, "create_unix_server",
                                    loop.create_unix_server(Echo, path))
            reader, writer = await _feature(loop_name, "create_unix_connection",
                                            asyncio.open_unix_connection(path))
            writer.write(b"unix")
            data = await reader.readexactly(4)
            writer.close()
            server.close()
            await server.wait_closed()
            return data

        assert run(loop, main()) == b"unix"


@pytest.mark.skipif(sys.platform == "win32", reason="Unix signals")
def test_a_signal_handler_runs_on_the_loop(loop, loop_name):
    async def main():
        got = loop.create_future()
        try:
            loop.add_signal_handler(signal.SIGUSR1, got.set_result, "SIGUSR1")
        except NotImplementedError as exc:
            await _feature(loop_name, "add_signal_handler", _raise(exc))
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            return await asyncio.wait_for(got, 5)
        finally:
            assert loop.remove_signal_handler(signal.SIGUSR1)

    assert run(loop, main()) == "SIGUSR1"


async def _raise(exc):
    raise exc


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX child")
def test_a_subprocess_pipeline_with_exit_code(loop, loop_name):
    async def main():
        process = await _feature(loop_name, "subprocess_exec", asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper()); sys.exit(3)",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE))
        out, _ = await process.communicate(b"through a pipe")
        return out, process.returncode

    assert run(loop, main(), timeout=60) == (b"THROUGH A PIPE", 3)
