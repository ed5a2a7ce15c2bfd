# tests/test_uv_accept.py
#
# tinyloop.uv's accept path in C (tinyloop/uv/tcp.pyx, _TCPListener): a
# TCP listener without TLS accepts with accept4(2) and makes the transport
# around the bare descriptor.  These tests hold it to what Part III's Python
# accept gave, where the conformance suite does not look:
#
#     both ends       peername from accept(2), sockname and the socket object
#                     when asked, equal to what the client's socket says;
#                     IPv4 and IPv6 (4-tuples)
#     the descriptor  non-blocking and close-on-exec from the one system call;
#                     refused to add_reader while its transport is open
#     errors          a protocol factory that raises is reported, its
#                     connection closed, and the listener goes on
#
# A TLS listener keeps Part III's Python accept (conformance:
# test_smoke_tls_unix.py); running out of descriptors, Part III's back-off
# (tests/test_limits.py, on the uv stage).
#
# Rules this file keeps: those of tests/test_uv_loop.py (skipped as a
# whole without the extension, every wait bounded, loopback only).

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from test_uv_loop import HOST, loop, run, run_until  # noqa: F401  (loop is a fixture)
from tinyloop import stages

_WHY = stages.get("uv").unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"uv: {_WHY}")


class Seen(asyncio.Protocol):
    """Records what the transport says about itself in connection_made, then echoes."""

    def __init__(self, asks: tuple[str, ...] = ("peername", "sockname", "socket")) -> None:
        self.asks = asks
        self.info: dict[str, Any] = {}
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.info = {key: transport.get_extra_info(key) for key in self.asks}
        self.info["sslcontext"] = transport.get_extra_info("sslcontext", "absent")

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True


def _serve_one(loop: asyncio.AbstractEventLoop, family: int, host: str,
               protocol: Seen) -> tuple[socket.socket, Any]:
    """A server for ``protocol`` on ``host``; a client connected and echoed once. Returns (client, server)."""
    server = run(loop, loop.create_server(lambda: protocol, host, 0, family=family))
    address = server.sockets[0].getsockname()
    client = socket.socket(family, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(address)
    client.setblocking(False)
    run_until(loop, lambda: protocol.transport is not None)
    client.send(b"ping")

    async def echoed() -> bytes:
        return await loop.sock_recv(client, 4)
    assert run(loop, echoed()) == b"ping"
    return client, server


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")],
                         ids=["ipv4", "ipv6"])
def test_an_accepted_connection_names_both_ends_as_the_socket_module_does(
        loop: asyncio.AbstractEventLoop, family: int, host: str) -> None:
    if family == socket.AF_INET6 and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    protocol = Seen()
    try:
        client, server = _serve_one(loop, family, host, protocol)
    except OSError as error:  # ::1 not configured (a container without IPv6)
        pytest.skip(f"cannot serve on {host}: {error}")
    with client:
        info = protocol.info
        assert type(protocol.transport).__name__ == "TCPTransport"
        assert info["peername"] == client.getsockname()   # IPv6: (host, port, flowinfo, scope_id)
        assert info["sockname"] == client.getpeername()
        sock = info["socket"]
        assert isinstance(sock, socket.socket)
        assert (sock.family, sock.type) == (family, socket.SOCK_STREAM)
        assert sock.gettimeout() == 0.0, "the socket object must say it is non-blocking"
        assert sock.getpeername() == client.getsockname() and sock.getsockname() == client.getpeername()
        assert info["sslcontext"] == "absent", "a key the transport lacks gives the default"
        assert protocol.transport.get_extra_info("no such key", 7) == 7
        protocol.transport.close()
        run_until(loop, lambda: protocol.lost)
        # Asked before the close: still there after it, as on asyncio.
        assert protocol.transport.get_extra_info("peername") == client.getsockname()
        assert protocol.transport.get_extra_info("sockname") == client.getpeername()
        server.close()
        run(loop, server.wait_closed())


def test_the_peer_is_known_without_asking_for_the_socket(loop: asyncio.AbstractEventLoop) -> None:
    """peername alone (a server logging its clients) comes from accept(2), before and after close."""
    protocol = Seen(asks=("peername",))
    client, server = _serve_one(loop, socket.AF_INET, HOST, protocol)
    with client:
        assert protocol.info["peername"] == client.getsockname()
        protocol.transport.close()
        run_until(loop, lambda: protocol.lost)
        assert protocol.transport.get_extra_info("peername") == client.getsockname()
        server.close()
        run(loop, server.wait_closed())


def test_an_accepted_descriptor_is_non_blocking_close_on_exec_and_owned(
        loop: asyncio.AbstractEventLoop) -> None:
    protocol = Seen()
    client, server = _serve_one(loop, socket.AF_INET, HOST, protocol)
    with client:
        fd = protocol.info["socket"].fileno()
        assert not os.get_blocking(fd), "accept4(SOCK_NONBLOCK): no ioctl needed after"
        assert not os.get_inheritable(fd), "accept4(SOCK_CLOEXEC): a child must not inherit it"
        # The descriptor is the transport's: the users' door refuses it, as asyncio's does.
        with pytest.raises(RuntimeError, match="is used by transport"):
            loop.add_reader(fd, lambda: None)
        with pytest.raises(RuntimeError, match="is used by transport"):
            loop.remove_writer(fd)
        protocol.transport.close()
        run_until(loop, lambda: protocol.lost)
        server.close()
        run(loop, server.wait_closed())


def test_a_protocol_factory_that_raises_is_reported_and_the_listener_goes_on(
        loop: asyncio.AbstractEventLoop) -> None:
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    made: list[Seen] = []

    def factory() -> Seen:
        if not made and not reports:
            raise ValueError("no protocol for the first client")
        made.append(Seen())
        return made[-1]

    server = run(loop, loop.create_server(factory, HOST, 0))
    address = server.sockets[0].getsockname()
    with socket.create_connection(address, timeout=5) as first:
        first.setblocking(False)
        run_until(loop, lambda: bool(reports))
        assert reports[0]["message"] == "Error in protocol_factory() while accepting"
        assert isinstance(reports[0]["exception"], ValueError)
        assert isinstance(reports[0]["socket"], socket.socket)

        async def end_of(sock: socket.socket) -> bytes:
            return await loop.sock_recv(sock, 10)
        assert run(loop, end_of(first)) == b"", "the refused connection must be closed"
    with socket.create_connection(address, timeout=5) as second:
        run_until(loop, lambda: bool(made) and made[0].transport is not None)
        second.sendall(b"still here")
        second.setblocking(False)

        async def echoed() -> bytes:
            return await loop.sock_recv(second, 10)
        assert run(loop, echoed()) == b"still here"
    run_until(loop, lambda: made[0].lost)
    server.close()
    run(loop, server.wait_closed())
    assert len(reports) == 1


def test_a_servers_clients_are_kept_weakly_in_c(loop: asyncio.AbstractEventLoop) -> None:
    """tinyloop.uv.loop.Server's ClientSet: close_clients reaches every client, wait_closed waits for
    them, and a transport nobody holds is collected (with its warning), as from Part III's WeakSet."""
    import gc
    import warnings

    protocols = [Seen(asks=()), Seen(asks=())]
    server = run(loop, loop.create_server(lambda: protocols.pop(0) if protocols else Seen(asks=()), HOST, 0))
    assert type(server._clients).__name__ == "ClientSet"
    address = server.sockets[0].getsockname()
    first, second = (socket.create_connection(address, timeout=5) for _ in range(2))
    run_until(loop, lambda: len(server._clients) == 2)
    kept, dropped = list(server._clients)
    dropped.pause_reading()   # libuv lets go of it: only our names hold it now
    dropped.get_protocol().transport = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del dropped
        gc.collect()
    messages = [str(w.message) for w in caught]
    del caught   # each warning holds its source, the transport
    gc.collect()
    assert any("unclosed transport" in message for message in messages)
    assert len(server._clients) == 1 and list(server._clients) == [kept]
    server.close()
    waiting = asyncio.ensure_future(server.wait_closed(), loop=loop)
    run(loop, asyncio.sleep(0.05))
    assert not waiting.done(), "wait_closed must wait for the client still connected"
    server.close_clients()
    run(loop, waiting)
    assert len(server._clients) == 0
    first.close()
    second.close()
