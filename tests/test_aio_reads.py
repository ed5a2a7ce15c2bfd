"""How a transport reads: into the loop's one buffer, copied out per read.

asyncio's selector transport asks ``sock.recv(max_size)`` for 256 KiB on
every read, so each read allocates 256 KiB before it knows what came: above
glibc's mmap threshold, an mmap/mremap/munmap and page faults per read
(tinyloop/aio/selector_events.py, _SelectorTransport's Discussion).
tinyloop.aio reads into one buffer per loop and copies out the bytes that
arrived.  tracemalloc sees the allocation whichever way glibc serves it, so
the first tests measure it on both loops: asyncio's peak shows the 256 KiB
(the measurement can see it), aio's must not.

The rest check that nothing a protocol can see changed: the bytes handed to
data_received are ``bytes`` and stay as they were while later reads land in
the same buffer; ``max_size`` set smaller still bounds each read; set larger
than the buffer, it is honoured too; set negative, it is asyncio's fatal
error.  Those run on both loops: asyncio is the reference.
"""

from __future__ import annotations

import asyncio
import socket
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

import tinyloop.aio

LOOPS = {"aio": tinyloop.aio.new_event_loop, "asyncio": asyncio.new_event_loop}
MAX_SIZE = 256 * 1024   # both loops' default max_size: what asyncio allocates per read
SMALL = 100             # bytes that arrive in the measured read
# What one read may allocate beyond the bytes that came: the bytes object's
# header, the loop's event list and handles.  A 256 KiB allocation is 100 times this.
ALLOWANCE = 2 * 1024


class Recorder(asyncio.Protocol):
    """Keeps every chunk data_received got, and what connection_lost was given."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.lost: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self.arrived = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.arrived.set()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


@pytest.fixture(params=sorted(LOOPS))
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    made = LOOPS[request.param]()
    made.set_exception_handler(lambda loop, context: handled.append(context))
    handled: list[dict] = []
    made.handled = handled  # type: ignore[attr-defined]
    try:
        yield made
    finally:
        made.close()


def run(loop: asyncio.AbstractEventLoop, body: Callable[[socket.socket, Recorder], object]) -> Recorder:
    """Connect a Recorder to one end of a socket pair, run ``body(far_end, recorder)``."""
    near, far = socket.socketpair()

    async def main() -> Recorder:
        transport, protocol = await asyncio.get_running_loop().connect_accepted_socket(Recorder, near)
        try:
            await asyncio.wait_for(body(far, protocol), 10)
        finally:
            transport.abort()
            await asyncio.sleep(0)
        return protocol

    try:
        return loop.run_until_complete(main())
    finally:
        far.close()


async def arrival(protocol: Recorder, count: int) -> None:
    """Until ``protocol`` has been given ``count`` bytes in all."""
    while sum(map(len, protocol.chunks)) < count:
        protocol.arrived.clear()
        await protocol.arrived.wait()


def peak_of_one_read(loop: asyncio.AbstractEventLoop, data: bytes) -> int:
    """Bytes allocated at the peak of the loop iterations that read ``data``, over what was held before."""
    measured: list[int] = []

    async def body(far: socket.socket, protocol: Recorder) -> None:
        far.sendall(b"warm")  # a first read, so that lazy set-up is not counted
        await arrival(protocol, 4)
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            far.sendall(data)
            await arrival(protocol, 4 + len(data))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        measured.append(peak - before)

    run(loop, body)
    return measured[0]


def test_a_small_read_allocates_what_came_not_max_size_on_aio_and_256_kib_on_asyncio() -> None:
    peaks = {}
    for name, factory in LOOPS.items():
        loop = factory()
        try:
            peaks[name] = peak_of_one_read(loop, b"x" * SMALL)
        finally:
            loop.close()
    assert peaks["asyncio"] >= MAX_SIZE, (
        f"asyncio's read allocated at most {peaks['asyncio']} bytes: this measurement no longer"
        f" sees its recv(max_size), so it cannot tell whether aio avoids it")
    assert peaks["aio"] <= SMALL + ALLOWANCE, (
        f"a {SMALL}-byte read allocated {peaks['aio']} bytes at its peak on tinyloop.aio: each"
        f" read should copy out what came, not allocate max_size ({MAX_SIZE} bytes) first")


def test_a_small_datagram_allocates_what_came_not_max_size() -> None:
    loop = tinyloop.aio.new_event_loop()
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    got: list[bytes] = []

    class Datagrams(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            got.append(data)

    async def main() -> int:
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(Datagrams, sock=near)
        try:
            far.send(b"warm")
            while not got:
                await asyncio.sleep(0)
            tracemalloc.start()
            try:
                before, _ = tracemalloc.get_traced_memory()
                far.send(b"y" * SMALL)
                while len(got) < 2:
                    await asyncio.sleep(0)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            return peak - before
        finally:
            transport.close()
            await asyncio.sleep(0)

    try:
        peak = loop.run_until_complete(main())
    finally:
        loop.close()
        far.close()
    assert got == [b"warm", b"y" * SMALL] and all(type(data) is bytes for data in got)
    assert peak <= SMALL + ALLOWANCE, (
        f"a {SMALL}-byte datagram allocated {peak} bytes at its peak: copy out what came")


def test_each_read_is_bytes_of_its_own_untouched_by_later_reads(loop: asyncio.AbstractEventLoop) -> None:
    messages = [bytes([65 + i]) * (100 + i) for i in range(20)]

    async def body(far: socket.socket, protocol: Recorder) -> None:
        for count, message in enumerate(messages, 1):
            far.sendall(message)
            await arrival(protocol, sum(map(len, messages[:count])))

    protocol = run(loop, body)
    assert all(type(chunk) is bytes for chunk in protocol.chunks)
    assert protocol.chunks == messages, "a chunk changed after it was handed over, or reads were merged"


def test_a_smaller_max_size_bounds_every_read(loop: asyncio.AbstractEventLoop) -> None:
    data = bytes(range(256)) * 40  # 10 KiB

    async def body(far: socket.socket, protocol: Recorder) -> None:
        protocol.transport.max_size = 1000  # type: ignore[attr-defined]
        far.sendall(data)
        await arrival(protocol, len(data))

    protocol = run(loop, body)
    assert b"".join(protocol.chunks) == data
    assert max(map(len, protocol.chunks)) <= 1000 and len(protocol.chunks) >= len(data) // 1000


def test_a_max_size_above_the_buffer_is_honoured(loop: asyncio.AbstractEventLoop) -> None:
    size = MAX_SIZE + 64 * 1024
    data = bytes(range(251)) * (size // 251 + 1)

    async def body(far: socket.socket, protocol: Recorder) -> None:
        protocol.transport.max_size = size  # type: ignore[attr-defined]
        far.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * size)
        protocol.transport.pause_reading()  # type: ignore[attr-defined]
        far.sendall(data)  # all of it waits in the kernel: the next read may take max_size
        protocol.transport.resume_reading()  # type: ignore[attr-defined]
        await arrival(protocol, len(data))

    protocol = run(loop, body)
    assert b"".join(protocol.chunks) == data
    assert not loop.handled, loop.handled  # type: ignore[attr-defined]
    assert max(map(len, protocol.chunks)) > MAX_SIZE, (
        f"no read took more than {MAX_SIZE} bytes with max_size set to {size}: "
        f"{[len(chunk) for chunk in protocol.chunks]}")


def test_a_negative_max_size_is_a_fatal_read_error(loop: asyncio.AbstractEventLoop) -> None:
    async def body(far: socket.socket, protocol: Recorder) -> None:
        protocol.transport.max_size = -1  # type: ignore[attr-defined]
        far.sendall(b"data")
        exc = await protocol.lost
        assert isinstance(exc, ValueError), exc

    protocol = run(loop, body)
    assert not protocol.chunks
    [context] = loop.handled  # type: ignore[attr-defined]
    assert context["message"] == "Fatal read error on socket transport"
    assert isinstance(context["exception"], ValueError)
