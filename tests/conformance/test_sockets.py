# tests/conformance/test_sockets.py
#
# Readiness callbacks and the sock_* coroutines, on loopback sockets.
# Source: the asyncio docs, "Watching file descriptors", "Working with socket
# objects directly", "DNS".
#
# Rules: every socket is non-blocking and closed by the test; a cancelled
# sock_* call must leave no reader or writer behind (checked by registering
# one of our own afterwards, which must be the only one called).

from __future__ import annotations

import asyncio
import os
import socket
import tempfile

import pytest

from conformance.conftest import run


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def udp_pair():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for sock in (a, b):
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
    yield a, b
    a.close()
    b.close()


# -- add_reader, add_writer ----------------------------------------------------------------

def test_add_reader_calls_back_when_readable_and_remove_reader_stops_it(loop, pair):
    a, b = pair
    got = []

    def on_readable():
        got.append(a.recv(100))
        loop.remove_reader(a)
        loop.stop()

    loop.add_reader(a, on_readable)
    loop.call_later(0.01, b.send, b"ping")
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert got == [b"ping"]


@pytest.mark.differs(loops=("uvloop",), reason="uvloop's remove_reader/remove_writer return None, "
                                              "not whether the descriptor was watched")
def test_remove_reader_and_remove_writer_say_whether_one_was_set(loop, pair):
    a, _ = pair
    loop.add_reader(a, print)
    loop.add_writer(a, print)
    answers = [loop.remove_reader(a), loop.remove_writer(a), loop.remove_reader(a),
               loop.remove_writer(a)]
    assert answers == [True, True, False, False]


def test_add_reader_takes_a_file_descriptor_number(loop, pair):
    a, b = pair
    got = []

    def on_readable(sock):
        got.append(sock.recv(100))
        loop.remove_reader(sock.fileno())
        loop.stop()

    loop.add_reader(a.fileno(), on_readable, a)
    b.send(b"by number")
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert got == [b"by number"]


def test_add_writer_calls_back_when_writable(loop, pair):
    a, _ = pair
    calls = []

    def on_writable(tag):
        calls.append(tag)
        loop.remove_writer(a)
        loop.stop()

    loop.add_writer(a, on_writable, "w")
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert calls == ["w"]


def test_a_reader_and_a_writer_on_one_socket_are_independent(loop, pair):
    a, b = pair
    log = []
    loop.add_writer(a, lambda: (log.append("w"), loop.remove_writer(a)))
    loop.add_reader(a, lambda: (log.append(a.recv(10)), loop.remove_reader(a), loop.stop()))
    loop.call_later(0.02, b.send, b"r")
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert log == ["w", b"r"]


def test_a_second_add_reader_replaces_the_first(loop, pair):
    a, b = pair
    log = []
    loop.add_reader(a, log.append, "first")
    loop.add_reader(a, lambda: (log.append("second"), loop.remove_reader(a), loop.stop()))
    b.send(b"x")
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert log == ["second"]


def test_add_reader_on_a_transports_socket_raises_runtime_error(loop, listener):
    async def main():
        transport, _ = await loop.create_connection(asyncio.Protocol, *listener.getsockname())
        sock = transport.get_extra_info("socket")
        try:
            for method in (loop.add_reader, loop.add_writer):
                with pytest.raises(RuntimeError):
                    method(sock.fileno(), print)
            for method in (loop.remove_reader, loop.remove_writer):
                with pytest.raises(RuntimeError):
                    method(sock.fileno())
        finally:
            transport.close()
            await asyncio.sleep(0)

    run(loop, main())


# -- sock_* coroutines -------------------------------------------------------------------

def test_sock_recv_waits_for_data_and_returns_empty_at_eof(loop, pair):
    a, b = pair

    async def main():
        loop.call_later(0.01, b.send, b"hello")
        first = await loop.sock_recv(a, 100)
        b.shutdown(socket.SHUT_WR)
        eof = await loop.sock_recv(a, 100)
        return first, eof

    assert run(loop, main()) == (b"hello", b"")


def test_sock_recv_into_fills_the_buffer(loop, pair):
    a, b = pair
    buf = bytearray(10)

    async def main():
        loop.call_later(0.01, b.send, b"abc")
        return await loop.sock_recv_into(a, buf)

    assert run(loop, main()) == 3
    assert buf[:3] == b"abc"


def test_sock_sendall_sends_more_than_the_socket_buffer(loop, pair):
    a, b = pair
    data = os.urandom(4 * 1024 * 1024)

    async def reader():
        received = bytearray()
        while len(received) < len(data):
            chunk = await loop.sock_recv(b, 65536)
            assert chunk
            received += chunk
        return bytes(received)

    async def main():
        task = asyncio.ensure_future(reader())
        await loop.sock_sendall(a, data)
        return await task

    assert run(loop, main()) == data


def test_sock_sendall_of_nothing_returns(loop, pair):
    a, _ = pair
    assert run(loop, loop.sock_sendall(a, b"")) is None


def test_sock_connect_and_sock_accept(loop, listener):
    async def main():
        client = socket.socket()
        client.setblocking(False)
        try:
            accepting = asyncio.ensure_future(loop.sock_accept(listener))
            await loop.sock_connect(client, listener.getsockname())
            conn, address = await accepting
            with conn:
                assert conn.gettimeout() == 0  # accepted non-blocking
                assert address == client.getsockname()
                await loop.sock_sendall(client, b"over tcp")
                return await loop.sock_recv(conn, 100)
        finally:
            client.close()

    assert run(loop, main()) == b"over tcp"


def test_sock_connect_to_a_closed_port_raises_connection_refused(loop):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    address = closed.getsockname()
    closed.close()

    async def main():
        client = socket.socket()
        client.setblocking(False)
        with client:
            await loop.sock_connect(client, address)

    with pytest.raises(ConnectionRefusedError):
        run(loop, main())


@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no sock_sendto/sock_recvfrom/"
                                              "sock_recvfrom_into (NotImplementedError)")
def test_sock_sendto_recvfrom_and_recvfrom_into(loop, udp_pair):
    a, b = udp_pair
    buf = bytearray(16)

    async def main():
        await loop.sock_sendto(a, b"datagram 1", b.getsockname())
        data, address = await loop.sock_recvfrom(b, 100)
        await loop.sock_sendto(a, b"datagram 2", b.getsockname())
        nbytes, address2 = await loop.sock_recvfrom_into(b, buf)
        await loop.sock_sendto(a, b"datagram 3", b.getsockname())
        nbytes3, _ = await loop.sock_recvfrom_into(b, buf, 4)
        return data, address, nbytes, address2, nbytes3

    data, address, nbytes, address2, nbytes3 = run(loop, main())
    assert data == b"datagram 1" and address == a.getsockname() == address2
    assert nbytes == 10 and nbytes3 == 4 and buf[:4] == b"data"


@pytest.mark.parametrize("operation", [
    "recv", "recv_into", "accept",
    pytest.param("recvfrom", marks=pytest.mark.differs(
        loops=("uvloop",), reason="uvloop has no sock_sendto/sock_recvfrom/"
                                  "sock_recvfrom_into (NotImplementedError)"))])
def test_a_cancelled_sock_call_leaves_no_reader_behind(loop, pair, listener, udp_pair, operation):
    a, b = pair
    sock = {"recv": a, "recv_into": a, "recvfrom": udp_pair[0], "accept": listener}[operation]
    call = {"recv": lambda: loop.sock_recv(a, 10),
            "recv_into": lambda: loop.sock_recv_into(a, bytearray(10)),
            "recvfrom": lambda: loop.sock_recvfrom(udp_pair[0], 10),
            "accept": lambda: loop.sock_accept(listener)}[operation]

    async def main():
        task = asyncio.ensure_future(call())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # No reader is left (remove_reader finds none; uvloop answers None
        # either way), and one of ours is called when the socket is readable.
        assert loop.remove_reader(sock) is not True, "the cancelled call left its reader behind"
        woke = loop.create_future()
        loop.add_reader(sock, lambda: woke.done() or woke.set_result("ours"))
        try:
            if operation == "recvfrom":
                udp_pair[1].sendto(b"x", udp_pair[0].getsockname())
            elif operation == "accept":
                await loop.run_in_executor(  # a blocking connect, off the loop's thread
                    None, lambda: socket.create_connection(listener.getsockname()).close())
            else:
                b.send(b"x")
            return await asyncio.wait_for(woke, 5)
        finally:
            loop.remove_reader(sock)

    assert run(loop, main()) == "ours"


async def _only_our_writer_is_called(loop, a, b):
    """After a cancelled call on ``a``: no writer is left (remove_writer finds none;
    uvloop answers None either way), and one of ours, once ``b`` is drained, is called."""
    assert loop.remove_writer(a) is not True, "the cancelled call left its writer behind"
    while True:
        try:
            if not b.recv(1 << 20):
                break
        except BlockingIOError:
            break
    woke = loop.create_future()
    loop.add_writer(a, lambda: woke.done() or woke.set_result("ours"))
    try:
        return await asyncio.wait_for(woke, 5)
    finally:
        loop.remove_writer(a)


def test_a_cancelled_sock_sendall_leaves_no_writer_behind(loop, pair):
    a, b = pair

    async def main():
        task = asyncio.ensure_future(loop.sock_sendall(a, b"x" * (16 * 1024 * 1024)))
        await asyncio.sleep(0.01)
        assert not task.done()  # the peer reads nothing: the send is stuck
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await _only_our_writer_is_called(loop, a, b)

    assert run(loop, main()) == "ours"


@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no sock_sendfile (NotImplementedError)")
def test_sock_sendfile_sends_a_range_of_a_file(loop, pair):
    a, b = pair
    data = os.urandom(300_000)

    async def read_all(n):
        got = bytearray()
        while len(got) < n:
            got += await loop.sock_recv(b, 65536)
        return bytes(got)

    with tempfile.TemporaryFile() as file:
        file.write(data)
        file.seek(0)

        async def main():
            reader = asyncio.ensure_future(read_all(200_000))
            sent = await loop.sock_sendfile(a, file, 50_000, 200_000)
            return sent, await reader, file.tell()

        sent, received, position = run(loop, main())
    assert sent == 200_000 and received == data[50_000:250_000] and position == 250_000


@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no sock_sendfile (NotImplementedError)")
def test_a_cancelled_sock_sendfile_leaves_no_writer_behind(loop, pair):
    a, b = pair
    with tempfile.TemporaryFile() as file:
        file.write(os.urandom(16 * 1024 * 1024))
        file.seek(0)

        async def main():
            task = asyncio.ensure_future(loop.sock_sendfile(a, file))
            await asyncio.sleep(0.01)
            assert not task.done()  # the peer reads nothing: sendfile(2) waits for room
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await _only_our_writer_is_called(loop, a, b)

        assert run(loop, main()) == "ours"


@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no sock_sendfile (NotImplementedError)")
def test_sock_sendfile_checks_its_arguments(loop, udp_pair, pair):
    with tempfile.TemporaryFile() as file:
        with pytest.raises(ValueError):
            run(loop, loop.sock_sendfile(udp_pair[0], file))
        with pytest.raises(ValueError):
            run(loop, loop.sock_sendfile(pair[0], file, -1))
        with pytest.raises(ValueError):
            run(loop, loop.sock_sendfile(pair[0], file, 0, 0))
    with tempfile.TemporaryFile("w") as text:
        with pytest.raises(ValueError):
            run(loop, loop.sock_sendfile(pair[0], text))


# -- Names ---------------------------------------------------------------------------------

def test_getaddrinfo_matches_the_socket_module(loop):
    infos = run(loop, loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM))
    assert infos == socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)
    infos = run(loop, loop.getaddrinfo("localhost", "80", family=socket.AF_INET,
                                       proto=socket.IPPROTO_TCP))
    assert all(info[4] == ("127.0.0.1", 80) for info in infos)


def test_getaddrinfo_of_an_unknown_host_raises_gaierror(loop):
    with pytest.raises(socket.gaierror):
        run(loop, loop.getaddrinfo("no-such-host.invalid", 80))


def test_getnameinfo_matches_the_socket_module(loop):
    address = ("127.0.0.1", 80)
    flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    assert run(loop, loop.getnameinfo(address, flags)) == socket.getnameinfo(address, flags)


@pytest.mark.parametrize("operation", ["connect", "sendall", "recv", "recv_into", "accept"])
def test_in_debug_mode_a_blocking_socket_is_refused(loop, listener, operation):
    loop.set_debug(True)
    sock = socket.socket()
    call = {"connect": lambda: loop.sock_connect(sock, listener.getsockname()),
            "sendall": lambda: loop.sock_sendall(sock, b"data"),
            "recv": lambda: loop.sock_recv(sock, 10),
            "recv_into": lambda: loop.sock_recv_into(sock, bytearray(10)),
            "accept": lambda: loop.sock_accept(sock)}[operation]
    with sock:
        with pytest.raises(ValueError):
            run(loop, call())
