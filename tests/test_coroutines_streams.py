"""Tests of the coroutine streams (tinyloop.coroutines.streams).

Reading is tested on real socket pairs with a real loop (``run``).  Flow
control is tested on a scripted socket whose ``send`` takes as many bytes as
the test allows, on the virtual clock and fake selector, so the high- and
low-water marks are checked byte for byte.
"""

from __future__ import annotations

import gc
import selectors
import socket
from typing import Any

import pytest
from fakes import FakeSelector, VirtualClock, run_until_idle

from tinyloop.callbacks.loop import Loop
from tinyloop.coroutines.streams import (IncompleteReadError, LimitOverrunError, StreamReader,
                                         StreamWriter, open_connection, start_server)
from tinyloop.coroutines.tasks import Task, gather, run, sleep, wait_for


@pytest.fixture(autouse=True)
def collect_garbage():
    """Free each test's finished tasks before the next test starts.

    A failed task that nobody awaited reports its exception when it is
    collected, and its traceback holds a reference cycle; collecting here
    puts the report in the test that caused it.
    """
    yield
    gc.collect()


def pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


# -- reading ------------------------------------------------------------------------------


def test_read_returns_what_is_there_and_waits_when_nothing_is() -> None:
    async def main() -> list[bytes]:
        a, b = pair()
        with a, b:
            reader = StreamReader(a)

            async def later() -> None:
                await sleep(0.01)
                b.send(b"second")
                b.shutdown(socket.SHUT_WR)

            b.send(b"first")
            got = [await reader.read(100)]
            Task(later(), loop=reader._loop)
            got.append(await reader.read(100))
            got.append(await reader.read(100))  # end of stream
            return got

    assert run(main()) == [b"first", b"second", b""]


def test_read_n_and_read_all() -> None:
    async def main() -> tuple[bytes, bytes]:
        a, b = pair()
        with a, b:
            b.sendall(b"0123456789")
            b.shutdown(socket.SHUT_WR)
            reader = StreamReader(a)
            return await reader.read(4), await reader.read()

    assert run(main()) == (b"0123", b"456789")


def test_readexactly_and_incomplete_read() -> None:
    async def main() -> tuple[bytes, IncompleteReadError]:
        a, b = pair()
        with a, b:
            b.sendall(b"abcdefgh")
            reader = StreamReader(a)
            exact = await reader.readexactly(5)
            b.shutdown(socket.SHUT_WR)
            with pytest.raises(IncompleteReadError) as info:
                await reader.readexactly(10)
            return exact, info.value

    exact, error = run(main())
    assert exact == b"abcde"
    assert error.partial == b"fgh" and error.expected == 10
    assert isinstance(error, EOFError)


def test_readuntil_across_many_reads() -> None:
    async def main() -> list[bytes]:
        a, b = pair()
        with a, b:
            reader = StreamReader(a)

            async def trickle() -> None:
                for piece in (b"GET / HT", b"TP/1.1\r", b"\n", b"Host: x\r\n\r", b"\n"):
                    b.send(piece)
                    await sleep(0.001)

            Task(trickle(), loop=reader._loop)
            return [await reader.readuntil(b"\r\n"), await reader.readuntil(b"\r\n\r\n")]

    assert run(main()) == [b"GET / HTTP/1.1\r\n", b"Host: x\r\n\r\n"]


def test_readuntil_limit_and_end_of_stream() -> None:
    async def main() -> None:
        a, b = pair()
        with a, b:
            reader = StreamReader(a, limit=10)
            b.sendall(b"x" * 20)
            with pytest.raises(LimitOverrunError) as overrun:
                await reader.readuntil(b"\n")
            assert overrun.value.consumed == 20
            assert await reader.read(100) == b"x" * 20  # still buffered
            b.sendall(b"tail")
            b.shutdown(socket.SHUT_WR)
            with pytest.raises(IncompleteReadError) as incomplete:
                await reader.readuntil(b"\n")
            assert incomplete.value.partial == b"tail" and incomplete.value.expected is None

    run(main())


def test_a_reader_waiting_is_woken_when_the_writer_closes() -> None:
    async def main() -> None:
        a, b = pair()
        with b:
            reader = StreamReader(a)
            writer = StreamWriter(a, reader)
            waiting = Task(reader.read(10), loop=reader._loop)
            await sleep(0.01)
            writer.close()
            with pytest.raises(ConnectionAbortedError):
                await waiting
            assert a.fileno() == -1

    run(main())


def test_a_cancelled_read_stops_watching_the_socket() -> None:
    async def main() -> None:
        a, b = pair()
        with a, b:
            reader = StreamReader(a)
            loop = reader._loop
            with pytest.raises(TimeoutError):
                await wait_for(reader.read(10), 0.01)
            assert loop.remove_reader(a) is False  # already gone

    run(main())


# -- writing and flow control (scripted) -----------------------------------------------------


class ScriptedSocket:
    """A stand-in for a socket whose send() takes at most ``room`` bytes per call."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.room = 0
        self.sent = bytearray()
        self.closed = False
        self.shut = False
        self.error: OSError | None = None

    def fileno(self) -> int:
        return -1 if self.closed else self.fd

    def send(self, data: Any) -> int:
        if self.error is not None:
            raise self.error
        if self.room == 0:
            raise BlockingIOError
        n = min(self.room, len(data))
        self.sent += bytes(data[:n])
        self.room -= n
        return n

    def shutdown(self, how: int) -> None:
        self.shut = True

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def scripted():
    clock = VirtualClock()
    selector = FakeSelector(clock)
    loop = Loop(selector=selector, clock=clock)
    sock = ScriptedSocket(fd=10_000)
    writer = StreamWriter(sock, loop=loop, high_water=1000, low_water=200)  # type: ignore[arg-type]
    yield loop, selector, sock, writer
    loop.close()


def test_write_sends_at_once_when_the_kernel_takes_it(scripted) -> None:
    loop, selector, sock, writer = scripted
    sock.room = 100
    writer.write(b"x" * 60)
    assert bytes(sock.sent) == b"x" * 60
    assert writer.get_write_buffer_size() == 0
    assert not selector.is_registered(sock)  # no write interest: nothing waits


def test_write_buffers_the_rest_and_asks_for_writability(scripted) -> None:
    loop, selector, sock, writer = scripted
    sock.room = 10
    writer.write(b"0123456789abcdef")
    assert writer.get_write_buffer_size() == 6
    assert selector.is_registered(sock, selectors.EVENT_WRITE)
    sock.room = 100
    selector.set_ready(sock, selectors.EVENT_WRITE)
    run_until_idle(loop, selector)
    assert bytes(sock.sent) == b"0123456789abcdef"
    assert not selector.is_registered(sock)  # write interest only while output waits


def test_drain_waits_above_the_high_water_mark_until_the_low_water_mark(scripted) -> None:
    loop, selector, sock, writer = scripted
    drained: list[int] = []

    async def producer() -> None:
        writer.write(b"x" * 1500)           # above the high-water mark (1000)
        await writer.drain()
        drained.append(writer.get_write_buffer_size())

    Task(producer(), loop=loop)
    run_until_idle(loop, selector)
    assert drained == []                    # the kernel took nothing: drain waits
    selector.set_ready(sock, selectors.EVENT_WRITE)
    sock.room = 700
    loop.run_once()                         # 1500 -> 800: below high, above low
    loop.run_once()
    assert drained == []
    sock.room = 500
    loop.run_once()                         # 800 -> 300: still above low
    loop.run_once()
    assert drained == []
    sock.room = 150
    loop.run_once()                         # 300 -> 150: at or below low (200): resume
    loop.run_once()
    assert drained == [150]


def test_drain_returns_at_once_below_the_high_water_mark(scripted) -> None:
    loop, selector, sock, writer = scripted
    done: list[bool] = []

    async def producer() -> None:
        writer.write(b"x" * 999)
        await writer.drain()
        done.append(True)

    Task(producer(), loop=loop)
    run_until_idle(loop, selector)
    assert done == [True]


def test_a_send_error_is_raised_by_the_next_drain_and_closes(scripted) -> None:
    loop, selector, sock, writer = scripted
    errors: list[BaseException] = []

    async def producer() -> None:
        writer.write(b"x" * 2000)
        try:
            await writer.drain()
        except ConnectionError as error:
            errors.append(error)

    Task(producer(), loop=loop)
    run_until_idle(loop, selector)
    sock.error = ConnectionResetError("peer reset")
    selector.set_ready(sock, selectors.EVENT_WRITE)
    run_until_idle(loop, selector)
    assert len(errors) == 1 and isinstance(errors[0], ConnectionResetError)
    assert sock.closed and not sock.shut  # reset: no FIN to send
    writer.write(b"ignored after the error")  # does not raise


def test_close_waits_for_the_output_then_sends_fin(scripted) -> None:
    loop, selector, sock, writer = scripted
    writer.write(b"last words")
    writer.close()
    assert not sock.closed
    with pytest.raises(RuntimeError):
        writer.write(b"more")
    sock.room = 100
    selector.set_ready(sock, selectors.EVENT_WRITE)
    run_until_idle(loop, selector)
    assert bytes(sock.sent) == b"last words" and sock.shut and sock.closed


def test_abort_drops_the_output(scripted) -> None:
    loop, selector, sock, writer = scripted
    writer.write(b"never sent")
    writer.abort()
    assert sock.closed and not sock.shut and not selector.is_registered(sock)


def test_write_buffer_limits_are_checked(scripted) -> None:
    writer = scripted[3]
    with pytest.raises(ValueError):
        writer.set_write_buffer_limits(high=10, low=20)
    writer.set_write_buffer_limits(high=400)
    assert (writer._high_water, writer._low_water) == (400, 100)


# -- servers and clients (loopback) ----------------------------------------------------------


def test_echo_server_and_client_over_loopback() -> None:
    async def echo(reader: StreamReader, writer: StreamWriter) -> None:
        try:
            while line := await reader.readuntil(b"\n"):
                writer.write(line.upper())
                await writer.drain()
        except (IncompleteReadError, ConnectionError):
            pass  # the client left, or the server closed us on its way out
        finally:
            writer.close()

    async def client(port: int, name: bytes) -> bytes:
        reader, writer = await open_connection("127.0.0.1", port)
        writer.write(b"hello from " + name + b"\n")
        answer = await reader.readuntil(b"\n")
        writer.close()
        await writer.wait_closed()
        return answer

    async def main() -> list[bytes]:
        server = await start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await gather(*(client(port, b"%d" % i) for i in range(5)))
        finally:
            server.close()
            assert server.sockets[0].fileno() == -1  # we bound it, we closed it

    assert run(main()) == [b"HELLO FROM %d\n" % i for i in range(5)]


def test_open_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound but not listening: refuses

        async def main() -> None:
            await open_connection("127.0.0.1", port)

        with pytest.raises(ConnectionRefusedError):
            run(main())


def test_server_close_aborts_open_connections() -> None:
    async def idle(reader: StreamReader, writer: StreamWriter) -> None:
        try:
            await reader.read(10)
        except ConnectionAbortedError:
            pass  # server.close() aborted us: that is what this test wants
        finally:
            writer.close()

    async def main() -> bytes:
        server = await start_server(idle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await open_connection("127.0.0.1", port)
        await sleep(0.02)  # accepted, the handler waits in read()
        server.close()
        data = await wait_for(reader.read(10), 2)
        writer.close()
        return data

    assert run(main()) == b""  # the server's side is gone: end of stream
