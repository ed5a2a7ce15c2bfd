# tests/conformance/test_connections.py
#
# Opening connections and serving them: create_connection (with Happy
# Eyeballs), create_server and its Server, connect_accepted_socket,
# create_datagram_endpoint.  Source: the asyncio docs, "Opening network
# connections", "Creating network servers", "Server Objects".
#
# Rules: loopback only.  Where a test needs several addresses for one name it
# scripts socket.getaddrinfo (asyncio and tinyloop resolve through it in the
# executor; uvloop resolves through libuv, which a test cannot script, so
# those tests are expected to fail there).  An address that never answers is
# a listener whose accept queue is full: the kernel drops the SYN, and the
# connect hangs as it would for an unreachable host.

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from conformance.conftest import run

NAME = "tinyloop-conformance.invalid"

SCRIPTED_RESOLVER = pytest.mark.differs(
    loops=("uvloop",), reason="uvloop resolves names through libuv, so a test cannot script "
                              "socket.getaddrinfo for it")


class Echo(asyncio.Protocol):
    """Echoes every byte; records its transport and whether the connection was lost."""

    def connection_made(self, transport):
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        self.transport.write(data)

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


class Collect(asyncio.Protocol):
    """Collects what it receives; ``until(n)`` waits for at least n bytes."""

    def __init__(self):
        self.data = bytearray()
        self.waiters = []
        self.eof = False

    def connection_made(self, transport):
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        self.data += data
        self._wake()

    def eof_received(self):
        self.eof = True
        self._wake()

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)
        self._wake()

    def _wake(self):
        for n, waiter in list(self.waiters):
            if (len(self.data) >= n or self.eof or self.lost.done()) and not waiter.done():
                waiter.set_result(None)

    async def until(self, n):
        if len(self.data) < n and not self.eof:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append((n, waiter))
            await waiter
        return bytes(self.data)


def free_port_closed(family=socket.AF_INET, host="127.0.0.1"):
    """An address on loopback where nothing listens (connect: ECONNREFUSED)."""
    sock = socket.socket(family)
    sock.bind((host, 0))
    address = sock.getsockname()
    sock.close()
    return address


@pytest.fixture
def blackhole():
    """A loopback address whose connect never completes: a listener with a full accept queue."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    first = socket.create_connection(full.getsockname())  # fills the queue
    yield full.getsockname()
    first.close()
    full.close()


@pytest.fixture
def scripted_resolver(monkeypatch):
    """``script(addresses)``: make getaddrinfo(NAME, ...) return these (family, sockaddr) pairs."""
    real = socket.getaddrinfo

    def script(addresses):
        def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
            if host != NAME:
                return real(host, port, family, type, proto, flags)
            return [(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", addr)
                    for fam, addr in addresses if family in (0, fam)]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    return script


def listen(family=socket.AF_INET, host="127.0.0.1"):
    sock = socket.socket(family)
    sock.bind((host, 0))
    sock.listen(8)
    return sock


# -- create_connection ---------------------------------------------------------------

def test_create_connection_to_host_and_port(loop, listener):
    async def main():
        transport, protocol = await loop.create_connection(Collect, *listener.getsockname())
        assert protocol.transport is transport
        conn, _ = await loop.sock_accept(listener)
        with conn:
            transport.write(b"hello")
            assert await loop.sock_recv(conn, 100) == b"hello"
            await loop.sock_sendall(conn, b"back")
            assert await protocol.until(4) == b"back"
            transport.close()
            return await protocol.lost

    assert run(loop, main()) is None


def test_create_connection_with_a_connected_sock(loop, listener):
    sock = socket.create_connection(listener.getsockname())

    async def main():
        transport, protocol = await loop.create_connection(Collect, sock=sock)
        conn, _ = await loop.sock_accept(listener)
        with conn:
            await loop.sock_sendall(conn, b"via sock=")
            data = await protocol.until(9)
            transport.close()
            await protocol.lost
            return data

    assert run(loop, main()) == b"via sock="


def test_create_connection_binds_local_addr(loop, listener):
    local = free_port_closed()

    async def main():
        transport, _ = await loop.create_connection(Collect, *listener.getsockname(),
                                                    local_addr=local)
        conn, peer = await loop.sock_accept(listener)
        conn.close()
        sockname = transport.get_extra_info("sockname")
        transport.close()
        return peer, sockname

    peer, sockname = run(loop, main())
    assert peer == local == sockname


def test_create_connection_to_a_closed_port_raises_connection_refused(loop):
    with pytest.raises(ConnectionRefusedError):
        run(loop, loop.create_connection(asyncio.Protocol, *free_port_closed()))


@SCRIPTED_RESOLVER
def test_create_connection_tries_the_next_address_when_one_refuses(loop, scripted_resolver):
    good = listen()
    scripted_resolver([(socket.AF_INET, free_port_closed()), (socket.AF_INET, good.getsockname())])

    async def main():
        transport, _ = await loop.create_connection(asyncio.Protocol, NAME, 80)
        peer = transport.get_extra_info("peername")
        transport.close()
        return peer

    with good:
        assert run(loop, main()) == good.getsockname()


@SCRIPTED_RESOLVER
def test_happy_eyeballs_starts_the_next_attempt_while_the_first_hangs(loop, scripted_resolver,
                                                                      blackhole):
    good = listen()
    scripted_resolver([(socket.AF_INET, blackhole), (socket.AF_INET, good.getsockname())])

    async def main():
        start = loop.time()
        transport, _ = await loop.create_connection(asyncio.Protocol, NAME, 80,
                                                    happy_eyeballs_delay=0.05)
        elapsed = loop.time() - start
        peer = transport.get_extra_info("peername")
        transport.close()
        return peer, elapsed

    address = good.getsockname()
    with good:
        peer, elapsed = run(loop, main())
    assert peer == address
    assert elapsed < 0.9  # did not wait for the first attempt's SYN retry (1 s)


@SCRIPTED_RESOLVER
def test_happy_eyeballs_when_every_address_refuses_raises_and_leaks_nothing(loop, scripted_resolver):
    import gc
    import warnings

    scripted_resolver([(socket.AF_INET, free_port_closed()) for _ in range(3)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(OSError):
            run(loop, loop.create_connection(asyncio.Protocol, NAME, 80, happy_eyeballs_delay=0.05))
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@SCRIPTED_RESOLVER
def test_interleave_alternates_address_families(loop, scripted_resolver):
    v6_second = listen(socket.AF_INET6, "::1")
    v4 = listen()
    scripted_resolver([(socket.AF_INET6, free_port_closed(socket.AF_INET6, "::1")),
                       (socket.AF_INET6, v6_second.getsockname()),
                       (socket.AF_INET, v4.getsockname())])

    async def peer(**kwargs):
        transport, _ = await loop.create_connection(asyncio.Protocol, NAME, 80, **kwargs)
        address = transport.get_extra_info("peername")
        transport.close()
        return address

    v6_address, v4_address = v6_second.getsockname()[:2], v4.getsockname()
    with v6_second, v4:
        # In getaddrinfo's order the second IPv6 address answers first; interleaved,
        # the IPv4 address is tried second and answers.
        assert run(loop, peer())[:2] == v6_address
        assert run(loop, peer(interleave=1)) == v4_address
        assert run(loop, peer(happy_eyeballs_delay=0.25)) == v4_address


@pytest.mark.skipif(sys.version_info < (3, 12), reason="all_errors is new in 3.12")
@SCRIPTED_RESOLVER
def test_all_errors_raises_an_exception_group_of_every_attempt(loop, scripted_resolver):
    scripted_resolver([(socket.AF_INET, free_port_closed()), (socket.AF_INET, free_port_closed())])
    with pytest.raises(ExceptionGroup) as info:
        run(loop, loop.create_connection(asyncio.Protocol, NAME, 80, all_errors=True))
    assert len(info.value.exceptions) == 2
    assert all(isinstance(exc, OSError) for exc in info.value.exceptions)
    with pytest.raises(OSError) as info:
        run(loop, loop.create_connection(asyncio.Protocol, NAME, 80))
    assert not isinstance(info.value, ExceptionGroup)


def test_create_connection_checks_its_arguments(loop, listener):
    host, port = listener.getsockname()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stream = socket.socket()
    with udp, stream:
        bad_calls = [
            dict(host=host, port=port, server_hostname="example.org"),
            dict(host=host, port=port, ssl_handshake_timeout=1.0),
            dict(host=host, port=port, sock=stream),
            dict(),
            dict(sock=udp),
        ]
        for kwargs in bad_calls:
            with pytest.raises(ValueError):
                run(loop, loop.create_connection(asyncio.Protocol, **kwargs))


# -- create_server and Server ------------------------------------------------------------

def test_create_server_serves_and_closes(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        assert server.get_loop() is loop
        assert server.is_serving()
        (sock,) = server.sockets
        address = sock.getsockname()
        transport, protocol = await loop.create_connection(Collect, *address)
        transport.write(b"echo me")
        assert await protocol.until(7) == b"echo me"
        transport.close()
        server.close()
        await server.wait_closed()
        assert not server.is_serving()
        return address

    address = run(loop, main())
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=2).close()


def test_create_server_on_several_hosts_listens_on_each(loop):
    async def main():
        server = await loop.create_server(Echo, ["127.0.0.1", "::1"], 0)
        families = sorted(sock.family for sock in server.sockets)
        server.close()
        await server.wait_closed()
        return families

    assert run(loop, main()) == sorted([socket.AF_INET, socket.AF_INET6])


def test_create_server_sets_reuse_address_by_default_and_reuse_port_on_request(loop):
    async def main():
        first = await loop.create_server(Echo, "127.0.0.1", 0, reuse_port=True)
        port = first.sockets[0].getsockname()[1]
        second = await loop.create_server(Echo, "127.0.0.1", port, reuse_port=True)
        options = [sock.getsockopt(socket.SOL_SOCKET, option)
                   for sock in (first.sockets[0], second.sockets[0])
                   for option in (socket.SO_REUSEADDR, socket.SO_REUSEPORT)]
        for server in (first, second):
            server.close()
            await server.wait_closed()
        return options

    assert all(run(loop, main()))


def test_create_server_refuses_an_address_in_use_without_reuse_port(loop, listener):
    with pytest.raises(OSError):
        run(loop, loop.create_server(Echo, *listener.getsockname()))


def test_create_server_with_start_serving_false_listens_only_when_started(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0, start_serving=False, backlog=5)
        assert not server.is_serving()
        address = server.sockets[0].getsockname()
        await server.start_serving()
        assert server.is_serving()
        transport, protocol = await loop.create_connection(Collect, *address)
        transport.write(b"started")
        data = await protocol.until(7)
        transport.close()
        server.close()
        await server.wait_closed()
        return data

    assert run(loop, main()) == b"started"


def test_create_server_with_a_listening_sock(loop, listener):
    async def main():
        server = await loop.create_server(Echo, sock=listener)
        transport, protocol = await loop.create_connection(Collect, *listener.getsockname())
        transport.write(b"sock=")
        data = await protocol.until(5)
        transport.close()
        server.close()
        await server.wait_closed()
        return data

    assert run(loop, main()) == b"sock="


def test_serve_forever_serves_until_cancelled_then_closes_the_server(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0, start_serving=False)
        address = server.sockets[0].getsockname()
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        assert server.is_serving()
        transport, protocol = await loop.create_connection(Collect, *address)
        transport.write(b"forever")
        await protocol.until(7)
        transport.close()
        await protocol.lost
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        return server.is_serving()

    assert run(loop, main()) is False


def test_async_with_server_closes_it(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        async with server:
            assert server.is_serving()
        assert not server.is_serving()

    run(loop, main())


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="3.11's wait_closed returned at once after close(); 3.12 waits for clients")
@pytest.mark.differs(loops=("uvloop",), reason="uvloop's wait_closed() returns without waiting "
                                              "for the clients, as asyncio's did before 3.12")
def test_wait_closed_waits_for_the_clients_to_leave(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        transport, protocol = await loop.create_connection(Collect, *server.sockets[0].getsockname())
        transport.write(b"hi")
        await protocol.until(2)
        server.close()
        waiting = asyncio.ensure_future(server.wait_closed())
        await asyncio.sleep(0.05)
        still_waiting = not waiting.done()
        transport.close()
        await asyncio.wait_for(waiting, 5)
        return still_waiting

    assert run(loop, main()) is True


@pytest.mark.parametrize("method", ["close_clients", "abort_clients"])
def test_close_clients_and_abort_clients_end_every_connection(loop, method):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        if not hasattr(server, method):
            server.close()
            pytest.skip(f"this loop's Server has no {method}() (asyncio has it from 3.13)")
        address = server.sockets[0].getsockname()
        clients = []
        for _ in range(3):
            transport, protocol = await loop.create_connection(Collect, *address)
            transport.write(b"x")
            await protocol.until(1)
            clients.append(protocol)
        server.close()
        getattr(server, method)()
        await asyncio.wait_for(asyncio.gather(*[client.lost for client in clients]), 5)
        await asyncio.wait_for(server.wait_closed(), 5)

    run(loop, main())


def test_connect_accepted_socket_serves_a_socket_accepted_elsewhere(loop, listener):
    client = socket.create_connection(listener.getsockname())
    listener.setblocking(True)
    accepted, _ = listener.accept()

    async def main():
        transport, protocol = await loop.connect_accepted_socket(Echo, accepted)
        assert protocol.transport is transport
        await loop.sock_sendall(client, b"accepted elsewhere")
        data = b""
        while len(data) < 18:
            data += await loop.sock_recv(client, 100)
        transport.close()
        return data

    client.setblocking(False)
    with client:
        assert run(loop, main()) == b"accepted elsewhere"


# -- Datagrams ------------------------------------------------------------------------

class Datagrams(asyncio.DatagramProtocol):
    def __init__(self, echo=False):
        self.echo = echo
        self.received = asyncio.Queue()
        self.errors = asyncio.Queue()

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if self.echo:
            self.transport.sendto(data.upper(), addr)
        self.received.put_nowait((data, addr))

    def error_received(self, exc):
        self.errors.put_nowait(exc)


def test_datagram_echo_with_remote_addr(loop):
    async def main():
        server_transport, _ = await loop.create_datagram_endpoint(
            lambda: Datagrams(echo=True), local_addr=("127.0.0.1", 0))
        address = server_transport.get_extra_info("sockname")
        transport, client = await loop.create_datagram_endpoint(Datagrams, remote_addr=address)
        assert transport.get_extra_info("peername") == address
        transport.sendto(b"ping")
        data, source = await client.received.get()
        with pytest.raises(ValueError):
            transport.sendto(b"elsewhere", ("127.0.0.1", 9))
        transport.close()
        server_transport.close()
        await asyncio.sleep(0)
        return data, source

    data, source = run(loop, main())
    assert data == b"PING" and source[0] == "127.0.0.1"


def test_datagram_endpoint_without_remote_addr_sends_to_any(loop):
    async def main():
        a_transport, a = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        b_transport, b = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        a_address = a_transport.get_extra_info("socket").getsockname()
        a_transport.sendto(b"to b", b_transport.get_extra_info("socket").getsockname())
        data, source = await b.received.get()
        a_transport.close()
        b_transport.close()
        await asyncio.sleep(0)
        return data, source == a_address

    assert run(loop, main()) == (b"to b", True)


def test_datagram_error_received_for_a_closed_port(loop):
    async def main():
        transport, protocol = await loop.create_datagram_endpoint(
            Datagrams, remote_addr=free_port_closed(socket.AF_INET))
        try:
            for _ in range(50):  # the ICMP reply comes back asynchronously
                transport.sendto(b"anyone?")
                try:
                    return await asyncio.wait_for(protocol.errors.get(), 0.1)
                except TimeoutError:
                    continue
        finally:
            transport.close()
            await asyncio.sleep(0)

    assert isinstance(run(loop, main()), ConnectionRefusedError)


def test_create_datagram_endpoint_checks_its_arguments(loop):
    stream = socket.socket()
    with stream:
        with pytest.raises(ValueError):
            run(loop, loop.create_datagram_endpoint(Datagrams, sock=stream))
    with pytest.raises(ValueError):
        run(loop, loop.create_datagram_endpoint(Datagrams))


def test_an_accepted_transport_knows_both_ends(loop):
    accepted = []

    class Server(Echo):
        def connection_made(self, transport):
            super().connection_made(transport)
            accepted.append({key: transport.get_extra_info(key) for key in ("peername", "sockname")})

    async def main():
        server = await loop.create_server(Server, "127.0.0.1", 0)
        transport, protocol = await loop.create_connection(Collect, *server.sockets[0].getsockname())
        transport.write(b"x")
        await protocol.until(1)
        ends = transport.get_extra_info("sockname"), transport.get_extra_info("peername")
        transport.close()
        server.close()
        await server.wait_closed()
        return ends

    client_sockname, client_peername = run(loop, main())
    assert accepted == [{"peername": client_sockname, "sockname": client_peername}]


def test_many_clients_at_once_are_all_served(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=200)
        address = server.sockets[0].getsockname()

        async def client(i):
            reader, writer = await asyncio.open_connection(*address)
            message = f"client {i}\n".encode()
            writer.write(message)
            line = await reader.readline()
            writer.close()
            await writer.wait_closed()
            return line == message

        results = await asyncio.gather(*[client(i) for i in range(100)])
        server.close()
        await server.wait_closed()
        return all(results)

    assert run(loop, main()) is True



def test_create_connection_with_a_local_addr_in_use_raises_eaddrinuse(loop, listener):
    import errno

    with pytest.raises(OSError) as info:
        run(loop, loop.create_connection(asyncio.Protocol, *listener.getsockname(),
                                         local_addr=listener.getsockname()))
    assert info.value.errno == errno.EADDRINUSE


def test_datagram_endpoint_with_only_a_family_is_an_unbound_socket(loop):
    async def main():
        transport, _ = await loop.create_datagram_endpoint(Datagrams, family=socket.AF_INET)
        receiver, protocol = await loop.create_datagram_endpoint(
            Datagrams, local_addr=("127.0.0.1", 0))
        transport.sendto(b"from nowhere", receiver.get_extra_info("socket").getsockname())
        data, _ = await protocol.received.get()
        family = transport.get_extra_info("socket").family
        transport.close()
        receiver.close()
        await asyncio.sleep(0)
        return data, family

    assert run(loop, main()) == (b"from nowhere", socket.AF_INET)
