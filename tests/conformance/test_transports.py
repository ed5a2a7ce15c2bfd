# tests/conformance/test_transports.py
#
# TCP transports and the protocol contract: what a transport calls on its
# protocol and when (connection_made, data_received or get_buffer/
# buffer_updated, eof_received, connection_lost), flow control both ways,
# half-close, abort, extra info, and loop.sendfile.  Source: the asyncio
# docs, "Transports and Protocols".
#
# Rules: the far end is a plain non-blocking socket driven with sock_*, so
# the test controls exactly when it reads; loopback only; every wait is
# bounded by run()'s timeout.

from __future__ import annotations

import asyncio
import io
import os
import socket
import tempfile

import pytest

from conformance.conftest import run

NO_SENDFILE_ON_UVLOOP = pytest.mark.differs(
    loops=("uvloop",), reason="uvloop has no loop.sendfile (NotImplementedError)")


class Recorder(asyncio.Protocol):
    """Records every protocol call in order; ``wait_for(name)`` awaits one."""

    def __init__(self, keep_open=False):
        self.calls = []
        self.data = bytearray()
        self.keep_open = keep_open
        self.events = {}

    def _event(self, name):
        if name not in self.events:
            self.events[name] = asyncio.get_running_loop().create_future()
        return self.events[name]

    def _record(self, name, *args):
        self.calls.append(name)
        event = self._event(name)
        if not event.done():
            event.set_result(args)

    async def wait_for(self, name):
        return await self._event(name)

    def connection_made(self, transport):
        self.transport = transport
        self._record("connection_made")

    def data_received(self, data):
        self.data += data
        self._record("data_received")

    def eof_received(self):
        self._record("eof_received")
        return self.keep_open

    def pause_writing(self):
        self._record("pause_writing")

    def resume_writing(self):
        self._record("resume_writing")

    def connection_lost(self, exc):
        self._record("connection_lost", exc)


async def connect(loop, listener, protocol):
    """(transport, protocol, peer socket): a transport to ``listener`` and the accepted far end."""
    accepting = asyncio.ensure_future(loop.sock_accept(listener))
    transport, protocol = await loop.create_connection(lambda: protocol, *listener.getsockname())
    peer, _ = await accepting
    return transport, protocol, peer


async def drain_socket(loop, sock, until):
    got = bytearray()
    while len(got) < until:
        chunk = await loop.sock_recv(sock, 1 << 20)
        if not chunk:
            break
        got += chunk
    return bytes(got)


@pytest.mark.differs(loops=("uvloop", "uv"), reason="uvloop's and tinyloop.uv's TCP transports are "
                     "not asyncio.Transport instances (Cython classes with the same methods)")
def test_a_tcp_transport_is_an_asyncio_transport(loop, listener):
    async def main():
        transport, _, peer = await connect(loop, listener, Recorder())
        peer.close()
        transport.close()
        return transport

    transport = run(loop, main())
    assert isinstance(transport, asyncio.Transport)


def test_protocol_calls_come_in_order_and_connection_lost_once(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            await loop.sock_sendall(peer, b"data")
            await protocol.wait_for("data_received")
            peer.shutdown(socket.SHUT_WR)
            (exc,) = await protocol.wait_for("connection_lost")
        return protocol.calls, exc, bytes(protocol.data), transport.is_closing()

    calls, exc, data, closing = run(loop, main())
    assert calls == ["connection_made", "data_received", "eof_received", "connection_lost"]
    assert exc is None and data == b"data" and closing


def test_get_extra_info_names_the_socket_and_both_ends(loop, listener):
    async def main():
        transport, _, peer = await connect(loop, listener, Recorder())
        with peer:
            info = {key: transport.get_extra_info(key) for key in ("socket", "peername", "sockname")}
            info["default"] = transport.get_extra_info("no such key", "fallback")
            info["peer_sockname"] = peer.getsockname()
            info["peer_peername"] = peer.getpeername()
            info["socket_sockname"] = info["socket"].getsockname()
            info["socket_family"] = info["socket"].family
            transport.close()
        return info

    info = run(loop, main())
    assert info["peername"] == info["peer_sockname"] == listener.getsockname()
    assert info["sockname"] == info["peer_peername"]
    assert info["socket_sockname"] == info["sockname"]
    assert info["socket_family"] == socket.AF_INET
    assert info["default"] == "fallback"


def test_write_buffer_limits_default_and_set(loop, listener):
    async def main():
        transport, _, peer = await connect(loop, listener, Recorder())
        with peer:
            default = transport.get_write_buffer_limits()
            transport.set_write_buffer_limits(high=1000, low=100)
            changed = transport.get_write_buffer_limits()
            transport.set_write_buffer_limits(high=400)
            derived = transport.get_write_buffer_limits()
            with pytest.raises(ValueError):
                transport.set_write_buffer_limits(high=10, low=20)
            transport.close()
        return default, changed, derived

    default, changed, derived = run(loop, main())
    assert default[1] > 0 and 0 <= default[0] <= default[1]
    assert changed == (100, 1000)
    assert derived == (100, 400)


def test_pause_and_resume_writing_reach_the_protocol_when_the_peer_does_not_read(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            transport.set_write_buffer_limits(high=64 * 1024, low=16 * 1024)
            chunk = b"x" * 65536
            written = 0
            while "pause_writing" not in protocol.calls and written < 64 * 1024 * 1024:
                transport.write(chunk)
                written += len(chunk)
            assert "pause_writing" in protocol.calls
            assert transport.get_write_buffer_size() > 64 * 1024
            reader = asyncio.ensure_future(drain_socket(loop, peer, written))
            await protocol.wait_for("resume_writing")
            assert transport.get_write_buffer_size() <= 16 * 1024
            received = await reader
            transport.close()
        return protocol.calls.count("pause_writing"), protocol.calls.count("resume_writing"), \
            len(received) == written

    assert run(loop, main()) == (1, 1, True)


def test_pause_reading_stops_data_received_until_resume_reading(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            assert transport.is_reading()
            transport.pause_reading()
            transport.pause_reading()  # idempotent
            assert not transport.is_reading()
            await loop.sock_sendall(peer, b"held back")
            await asyncio.sleep(0.05)
            held = bytes(protocol.data)
            transport.resume_reading()
            transport.resume_reading()
            await protocol.wait_for("data_received")
            transport.close()
        return held, bytes(protocol.data)

    assert run(loop, main()) == (b"", b"held back")


def test_write_eof_half_closes_and_reading_goes_on(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            assert transport.can_write_eof()
            transport.write(b"last words")
            transport.write_eof()
            received = await drain_socket(loop, peer, 1 << 20)  # ends at our FIN
            assert not transport.is_closing()
            with pytest.raises(RuntimeError):
                transport.write(b"after eof")
            await loop.sock_sendall(peer, b"reply")
            await protocol.wait_for("data_received")
            transport.close()
        return received, bytes(protocol.data)

    assert run(loop, main()) == (b"last words", b"reply")


def test_eof_received_returning_true_keeps_the_transport_open_for_writing(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder(keep_open=True))
        with peer:
            peer.shutdown(socket.SHUT_WR)
            await protocol.wait_for("eof_received")
            await asyncio.sleep(0.02)
            assert "connection_lost" not in protocol.calls
            transport.write(b"still writing")
            received = await drain_socket(loop, peer, 13)
            transport.close()
            await protocol.wait_for("connection_lost")
        return received

    assert run(loop, main()) == b"still writing"


def test_close_flushes_the_buffer_then_calls_connection_lost(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            data = os.urandom(2 * 1024 * 1024)
            transport.write(data)
            transport.close()
            assert transport.is_closing()
            transport.close()  # idempotent
            received = await drain_socket(loop, peer, len(data) + 1)
            (exc,) = await protocol.wait_for("connection_lost")
        return received == data, exc

    assert run(loop, main()) == (True, None)


def test_abort_drops_the_buffer_and_resets(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            transport.write(b"x" * (8 * 1024 * 1024))
            transport.abort()
            assert transport.is_closing()
            (exc,) = await protocol.wait_for("connection_lost")
            received = 0
            try:
                while True:
                    chunk = await loop.sock_recv(peer, 1 << 20)
                    if not chunk:
                        break
                    received += len(chunk)
            except ConnectionResetError:
                pass
        return exc, received < 8 * 1024 * 1024

    assert run(loop, main()) == (None, True)


def test_writelines_sends_every_buffer(loop, listener):
    async def main():
        transport, _, peer = await connect(loop, listener, Recorder())
        with peer:
            transport.writelines([b"one ", bytearray(b"two "), memoryview(b"three")])
            received = await drain_socket(loop, peer, 13)
            transport.close()
        return received

    assert run(loop, main()) == b"one two three"


def test_write_refuses_text(loop, listener):
    async def main():
        transport, _, peer = await connect(loop, listener, Recorder())
        with peer:
            with pytest.raises(TypeError):
                transport.write("text")
            transport.close()

    run(loop, main())


class Buffered(asyncio.BufferedProtocol):
    def __init__(self):
        self.buffer = bytearray(7)  # small, so one send takes several reads
        self.received = bytearray()
        self.sizes = []
        self.lost = None

    def connection_made(self, transport):
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint):
        self.sizes.append(sizehint)
        return self.buffer

    def buffer_updated(self, nbytes):
        self.received += self.buffer[:nbytes]

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def test_buffered_protocol_reads_into_get_buffer(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Buffered())
        with peer:
            await loop.sock_sendall(peer, b"into the given buffer")
            peer.shutdown(socket.SHUT_WR)
            await protocol.lost
        return bytes(protocol.received), len(protocol.sizes)

    received, calls = run(loop, main())
    assert received == b"into the given buffer"
    assert calls >= 3


def test_set_protocol_switches_the_receiving_protocol(loop, listener):
    async def main():
        transport, first, peer = await connect(loop, listener, Recorder())
        with peer:
            second = Recorder()
            transport.set_protocol(second)
            assert transport.get_protocol() is second
            await loop.sock_sendall(peer, b"for the second")
            await second.wait_for("data_received")
            transport.close()
        return bytes(first.data), bytes(second.data)

    assert run(loop, main()) == (b"", b"for the second")


# -- loop.sendfile ----------------------------------------------------------------------

@NO_SENDFILE_ON_UVLOOP
def test_sendfile_sends_a_regular_file_over_a_transport(loop, listener):
    data = os.urandom(500_000)
    with tempfile.TemporaryFile() as file:
        file.write(data)
        file.seek(0)

        async def main():
            transport, _, peer = await connect(loop, listener, Recorder())
            with peer:
                reader = asyncio.ensure_future(drain_socket(loop, peer, 400_000))
                sent = await loop.sendfile(transport, file, 100_000)
                received = await reader
                transport.close()
            return sent, received, file.tell()

        sent, received, position = run(loop, main())
    assert sent == 400_000 and received == data[100_000:] and position == 500_000


@NO_SENDFILE_ON_UVLOOP
def test_sendfile_waits_for_a_slow_reader(loop, listener):
    data = os.urandom(16 * 1024 * 1024)  # more than the socket buffers hold: sendfile(2) hits EAGAIN
    with tempfile.TemporaryFile() as file:
        file.write(data)
        file.seek(0)

        async def main():
            transport, protocol, peer = await connect(loop, listener, Recorder())
            with peer:
                async def read_later():
                    await asyncio.sleep(0.05)
                    return await drain_socket(loop, peer, len(data))

                reader = asyncio.ensure_future(read_later())
                sent = await loop.sendfile(transport, file)
                received = await reader
                transport.write(b"after")  # the transport is its own again
                after = await drain_socket(loop, peer, 5)
                transport.close()
            return sent, received == data, after

        assert run(loop, main()) == (len(data), True, b"after")


@NO_SENDFILE_ON_UVLOOP
def test_sendfile_falls_back_to_writes_for_a_file_without_a_descriptor(loop, listener):
    data = os.urandom(300_000)
    file = io.BytesIO(data)

    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        with peer:
            reader = asyncio.ensure_future(drain_socket(loop, peer, 200_000))
            sent = await loop.sendfile(transport, file, 0, 200_000)
            received = await reader
            transport.write(b"after")  # the transport is usable afterwards
            after = await drain_socket(loop, peer, 5)
            transport.close()
        return sent, received, after

    sent, received, after = run(loop, main())
    assert sent == 200_000 and received == data[:200_000] and after == b"after"


@NO_SENDFILE_ON_UVLOOP
def test_sendfile_without_fallback_raises_when_only_the_fallback_would_work(loop, listener):
    async def main():
        transport, _, peer = await connect(loop, listener, Recorder())
        with peer:
            try:
                with pytest.raises(asyncio.SendfileNotAvailableError):
                    await loop.sendfile(transport, io.BytesIO(b"data"), fallback=False)
            finally:
                transport.close()

    run(loop, main())


@NO_SENDFILE_ON_UVLOOP
def test_sendfile_on_a_datagram_transport_is_not_supported(loop):
    with tempfile.TemporaryFile() as file:
        file.write(b"data")
        file.seek(0)

        async def main():
            transport, _ = await loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
            try:
                with pytest.raises(RuntimeError, match="not supported"):
                    await loop.sendfile(transport, file)
            finally:
                transport.close()
                await asyncio.sleep(0)
            return file.tell()

        assert run(loop, main()) == 0
