# tests/test_exercise_streams.py
#
# Stream integrity: every exercise on a write or read path must deliver
# exactly the bytes written, in order, exactly once, and leave no
# descriptor or CPU busy once they are out.  Each test here is a
# hypothesis property: random write sizes, a reader that drains at random
# rates, partial sends forced by small socket buffers (SO_SNDBUF,
# SO_RCVBUF), and write/writelines/write_eof interleaved where the API has
# them.  The checker runs these with the exercise's own tests (they are
# named test_<exercise>_..., tinyloop/exercises/checker.py).
#
# Rules this file keeps:
#   * Every byte written is a function of its offset in the stream (a
#     pattern of period 251, a prime no write size shares), so a byte that
#     arrives early, twice or never is seen at its offset, and the message
#     says which.
#   * Bounded: hypothesis runs a fixed number of examples, derandomized (a
#     student gets the same verdict on every run), with no example database
#     (nothing written into the checkout) and no shrinking; every wait has a
#     deadline.
#   * The bug a student reported is an explicit @example, so it is caught
#     on every run, not by luck: transport-write with `if not self._buffer:`
#     replaced by `if True:` sends a later write before the buffered bytes.

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import stage_params
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tinyloop.exercises.properties import send_quietly

# Small buffers force partial sends (Linux doubles the value and keeps a floor of ~4.6 KB).
SMALL_BUFFER = 4096
PERIOD = 251
_PATTERN = bytes(range(PERIOD)) * (((4 << 20) // PERIOD) + 2)
DEADLINE = 10.0  # seconds for all bytes to arrive once the writer is done
# A CPU-time threshold (the idle loop): run without a neighbour.
pytestmark = pytest.mark.alone

IDLE_WINDOW = 0.05  # seconds the loop runs idle at the end; it may use half of it in CPU

# No shrinking: a failing example is reported as found.  Shrinking re-runs
# examples, and one that waits out pytest-timeout counts as a failure too, so
# a hang shrank for minutes before the check said anything.
SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def stream(offset: int, size: int) -> bytes:
    """The ``size`` bytes of the stream starting at ``offset``."""
    start = offset % PERIOD
    return _PATTERN[start:start + size]


def first_difference(got: bytes, expected: bytes) -> str:
    """Say where and how ``got`` differs from ``expected``, in a student's words."""
    if got == expected:
        return "identical"
    n = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    if n == len(got):
        return f"the receiver got only {len(got):,} of the {len(expected):,} bytes written (lost or never sent)"
    if n == len(expected):
        return (f"the receiver got {len(got) - len(expected):,} bytes more than the {len(expected):,} "
                "written (some were sent twice)")
    same_bytes = len(got) == len(expected) and all(got.count(c) == expected.count(c) for c in range(256))
    why = ("every byte arrived, in another order: bytes written later overtook older buffered ones"
           if same_bytes else "bytes lost, sent twice or overwritten")
    return (f"the stream differs at offset {n:,} of {len(expected):,}: {why} "
            f"(got {got[n:n + 8]!r}, expected {expected[n:n + 8]!r})")


def tcp_pair(sndbuf: int = SMALL_BUFFER, rcvbuf: int = SMALL_BUFFER) -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on 127.0.0.1 (writer, reader), both with small buffers, non-blocking."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        reader.connect(listener.getsockname())
        writer, _ = listener.accept()
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    writer.setblocking(False)
    reader.setblocking(False)
    return writer, reader


def drain(sock: socket.socket, limit: int, into: bytearray) -> bool:
    """Read up to ``limit`` bytes that are there now into ``into``; True at end of stream."""
    while limit > 0:
        try:
            chunk = sock.recv(min(limit, 65536))
        except BlockingIOError:
            return False
        if not chunk:
            return True
        into += chunk
        limit -= len(chunk)
    return False


# --- transport-write, uv-write-batch: an asyncio transport --------------------------------

# One operation on the writing side, or on the reader:
#   ("write", size, kind)      transport.write of bytes, bytearray or memoryview
#   ("writelines", [sizes])    transport.writelines
#   ("drain", size)            the reader takes up to size bytes that have arrived
#   ("turn",)                  the loop runs one iteration (its writer callbacks, a batch's flush)
_WRITE = st.tuples(st.just("write"),
                   st.one_of(st.integers(1, 512), st.integers(1, 64 << 10), st.integers(64 << 10, 1 << 20)),
                   st.sampled_from(["bytes", "bytearray", "memoryview"]))
_WRITELINES = st.tuples(st.just("writelines"), st.lists(st.integers(0, 32 << 10), min_size=1, max_size=4))
_DRAIN = st.tuples(st.just("drain"), st.integers(1, 256 << 10))
_TURN = st.tuples(st.just("turn"))
OPERATIONS = st.lists(st.one_of(_WRITE, _WRITELINES, _DRAIN, _TURN), min_size=1, max_size=25)

# The reported bug: 1 MB to a slow reader, then b"Z" (Z arrived at offset 8,064).
REORDER = [("write", 1 << 20, "bytes"), ("drain", 64 << 10), ("write", 1, "bytes"), ("turn",)]


class Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.lost: list[BaseException | None] = []

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.append(exc)


def new_loop(stage: str) -> asyncio.AbstractEventLoop:
    if stage == "aio":
        import tinyloop.aio
        return tinyloop.aio.new_event_loop()
    import tinyloop.uv
    return tinyloop.uv.new_event_loop()


def one_turn(loop: asyncio.AbstractEventLoop) -> None:
    loop.call_soon(loop.stop)
    loop.run_forever()


def run_stream(stage: str, operations: list[tuple[Any, ...]], eof: bool) -> None:
    loop = new_loop(stage)
    wsock, rsock = tcp_pair()
    transport = None
    try:
        transport, protocol = loop.run_until_complete(loop.create_connection(Sink, sock=wsock))
        written, received, offset, ended = [], bytearray(), 0, False

        def data(size: int, kind: str = "bytes") -> Any:
            nonlocal offset
            chunk = stream(offset, size)
            offset += size
            written.append(chunk)
            return {"bytes": chunk, "bytearray": bytearray(chunk), "memoryview": memoryview(chunk)}[kind]

        for op in operations:
            if op[0] == "write":
                transport.write(data(op[1], op[2]))
            elif op[0] == "writelines":
                transport.writelines([data(size) for size in op[1]])
            elif op[0] == "drain":
                ended = drain(rsock, op[1], received) or ended
            else:
                one_turn(loop)
        if eof:
            transport.write_eof()
        expected = b"".join(written)
        deadline = time.monotonic() + DEADLINE
        while not ended and (eof or len(received) < len(expected)) and time.monotonic() < deadline:
            one_turn(loop)
            ended = drain(rsock, 1 << 20, received)
            if len(received) < len(expected) and not ended:
                loop.run_until_complete(asyncio.sleep(0.001))
        assert bytes(received) == expected, (
            f"{len(operations)} operations ({describe(operations, eof)}): " +
            first_difference(bytes(received), expected))
        assert not eof or ended, (
            "after write_eof() and every byte sent, the receiver must see the end of stream; "
            f"it did not within {DEADLINE:g} s")
        assert transport.get_write_buffer_size() == 0, (
            "every byte has arrived, yet get_write_buffer_size() is "
            f"{transport.get_write_buffer_size()}: the buffer was not emptied as it was sent")
        cpu = time.thread_time()
        loop.run_until_complete(asyncio.sleep(IDLE_WINDOW))
        cpu = time.thread_time() - cpu
        assert cpu < IDLE_WINDOW / 2, (
            f"with every byte sent, the loop used {cpu:.3f} s of CPU in {IDLE_WINDOW:g} s of idling: "
            "it spins, e.g. a writer still registered on a socket with nothing to send")
        assert not protocol.lost, f"the connection was lost while writing: {protocol.lost}"
    finally:
        if transport is not None:
            transport.abort()
        rsock.close()
        try:
            one_turn(loop)
        finally:
            loop.close()
            wsock.close()


def describe(operations: list[tuple[Any, ...]], eof: bool) -> str:
    words = []
    for op in operations[:8]:
        if op[0] == "write":
            words.append(f"write({op[1]:,} bytes)")
        elif op[0] == "writelines":
            words.append(f"writelines({[f'{s:,}' for s in op[1]]})")
        elif op[0] == "drain":
            words.append(f"reader takes {op[1]:,}")
        else:
            words.append("one loop turn")
    more = ", ..." if len(operations) > 8 else ""
    return ", ".join(words) + more + (", write_eof()" if eof else "")


def _stream_property(stage: str):
    @SETTINGS
    @given(operations=OPERATIONS, eof=st.booleans())
    @example(operations=REORDER, eof=False)
    @example(operations=[("write", 300_000, "bytes"), ("writelines", [1000, 1]), ("drain", 5000),
                         ("write", 7, "bytearray"), ("turn",), ("drain", 100_000), ("write", 1, "bytes")],
             eof=True)
    def prop(operations: list[tuple[Any, ...]], eof: bool) -> None:
        run_stream(stage, operations, eof)
    return prop


@pytest.mark.parametrize("stage", stage_params(["aio"]))
def test_transport_write_delivers_every_byte_once_in_order(stage: str) -> None:
    _stream_property(stage)()


@pytest.mark.parametrize("stage", stage_params(["uv"]))
def test_uv_write_batch_delivers_every_byte_once_in_order(stage: str) -> None:
    _stream_property(stage)()


# --- flow-control: Part II's StreamWriter with drain() --------------------------------------

def test_flow_control_delivers_every_byte_once_in_order_and_bounds_the_buffer() -> None:
    from tinyloop.callbacks.loop import Loop
    from tinyloop.coroutines.streams import StreamWriter, wait_readable
    from tinyloop.coroutines.tasks import gather, run, sleep, wait_for

    high, low = 16 << 10, 4 << 10

    @SETTINGS
    @given(sizes=st.lists(st.one_of(st.integers(1, 2048), st.integers(1, 64 << 10)), min_size=1, max_size=30),
           reads=st.lists(st.tuples(st.integers(1, 64 << 10), st.booleans()), min_size=1, max_size=30))
    def prop(sizes: list[int], reads: list[tuple[int, bool]]) -> None:
        loop = Loop()
        wsock, rsock = tcp_pair()
        received, offset, worst = bytearray(), 0, []
        writer = StreamWriter(wsock, loop=loop, high_water=high, low_water=low)

        async def produce() -> None:
            nonlocal offset
            for size in sizes:
                writer.write(stream(offset, size))
                offset += size
                await writer.drain()
                worst.append(writer.get_write_buffer_size())
            writer.close()

        async def consume() -> None:
            i = 0
            while True:
                size, pause = reads[i % len(reads)]
                i += 1
                if pause:
                    await sleep(0.001)
                await wait_readable(rsock)
                if drain(rsock, size, received):
                    return

        async def both() -> None:
            await wait_for(gather(produce(), consume()), DEADLINE)

        try:
            try:
                run(both(), loop=loop)
            except TimeoutError:
                pytest.fail(f"writing {len(sizes)} chunks with drain() after each did not finish within "
                            f"{DEADLINE:g} s (the receiver had {len(received):,} of {offset:,} bytes): "
                            "does drain() wait for a wake-up that never comes?")
            expected = stream(0, offset)
            assert bytes(received) == expected, first_difference(bytes(received), expected)
            assert max(worst) <= high, (
                f"drain() returned with {max(worst):,} bytes buffered, above the high-water mark "
                f"({high:,}): a writer that awaits drain() must not buffer without bound")
        finally:
            if not loop.is_closed():
                loop.close()
            wsock.close()
            rsock.close()

    prop()


# --- partial-writes, backpressure, edge-triggered: a readiness server ----------------------

# A server of the stage, whose listener has small buffers: on Linux an
# accepted socket inherits them, so the server's own sends are partial.
_SERVER = """\
import socket, sys
from tinyloop._override import apply_override
apply_override()
from tinyloop import stages
from tinyloop.serving import announce, stop_on_sigterm
stage = sys.argv[1]
sock = socket.create_server(("127.0.0.1", 0))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, %d)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, %d)
stop_on_sigterm()
announce(stage, sock)
try:
    stages.load(stage).serve(sock)
except KeyboardInterrupt:
    pass
""" % (SMALL_BUFFER, SMALL_BUFFER)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    from tinyloop.testing import ServerProcess
    running: dict[str, Any] = {}

    def get(stage: str) -> Any:
        if stage not in running:
            running[stage] = ServerProcess(stage, command=[sys.executable, "-c", _SERVER, stage]).start()
        return running[stage]

    yield get  # type: ignore[misc]
    for server in running.values():
        server.__exit__(None, None, None)


def echo_request(body: bytes, close: bool) -> bytes:
    return (b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n"
            % (len(body), b"Connection: close\r\n" if close else b"")) + body


def bodies_of(stream_bytes: bytes) -> list[bytes]:
    """The bodies of the HTTP responses in ``stream_bytes``, in order (ValueError if malformed)."""
    bodies, at = [], 0
    while at < len(stream_bytes):
        end = stream_bytes.find(b"\r\n\r\n", at)
        if end < 0:
            raise ValueError(f"an incomplete response head at offset {at:,}: {stream_bytes[at:at + 40]!r}")
        head = stream_bytes[at:end].decode("latin-1").split("\r\n")
        length = next((int(line.split(":", 1)[1]) for line in head[1:]
                       if line.lower().startswith("content-length:")), 0)
        if not head[0].startswith("HTTP/1.1 200"):
            raise ValueError(f"response {len(bodies) + 1} is {head[0]!r}, not 200")
        bodies.append(stream_bytes[end + 4:end + 4 + length])
        at = end + 4 + length
    return bodies


def run_echo(address: tuple[str, int], sizes: list[int], reads: list[tuple[int, float]]) -> None:
    bodies, offset = [], 0
    for size in sizes:
        bodies.append(stream(offset, size))
        offset += size
    request = b"".join(echo_request(body, i == len(bodies) - 1) for i, body in enumerate(bodies))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
    sock.settimeout(DEADLINE)
    sock.connect(address)
    # Send from a thread while this one reads at its own rates: the server
    # answers before the last request is in, and a client that only sent
    # would stall both sides.
    sender = threading.Thread(target=lambda: send_quietly(sock, request), daemon=True)
    sender.start()
    received = bytearray()
    try:
        deadline = time.monotonic() + DEADLINE
        i = 0
        while time.monotonic() < deadline:
            size, pause = reads[i % len(reads)]
            i += 1
            if pause:
                time.sleep(pause)
            chunk = sock.recv(size)
            if not chunk:
                break
            received += chunk
        else:
            pytest.fail(f"the responses to {len(sizes)} pipelined echoes did not end within {DEADLINE:g} s "
                        f"(the client had {len(received):,} bytes)")
    except TimeoutError:
        pytest.fail(f"the server sent nothing for {DEADLINE:g} s, with {len(received):,} bytes received "
                    f"of the answers to {len(sizes)} pipelined echoes of {sizes} bytes")
    except ConnectionResetError:
        pytest.fail(f"the server reset the connection after {len(received):,} bytes of the answers "
                    f"to {len(sizes)} pipelined echoes of {sizes} bytes")
    finally:
        sock.close()
        sender.join(DEADLINE)
    try:
        got = bodies_of(bytes(received))
    except ValueError as error:
        pytest.fail(f"the response stream to {len(sizes)} pipelined echoes ({sizes} bytes) is broken: {error}")
    assert b"".join(got) == b"".join(bodies) and len(got) == len(bodies), (
        f"{len(sizes)} pipelined echoes of {sizes} bytes: "
        + first_difference(b"".join(got), b"".join(bodies)))


def server_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_ECHOES = st.lists(st.one_of(st.integers(0, 2048), st.integers(0, 300_000)), min_size=1, max_size=8)
_READS = st.lists(st.tuples(st.integers(1, 128 << 10), st.sampled_from([0, 0, 0, 0.0005, 0.002])),
                  min_size=1, max_size=12)


def stream_integrity_of_pipelined_echoes(stage: str, servers: Any) -> None:
    """A ``stage`` server answers pipelined echoes with exactly the bytes sent, then rests."""
    server = servers(stage)
    run_echo(server.address, [1], [(100, 0)])  # the server has made its poller by now
    time.sleep(0.1)
    before = server_descriptors(server.pid)

    @SETTINGS
    @given(sizes=_ECHOES, reads=_READS)
    @example(sizes=[1 << 20, 1], reads=[(8192, 0.002)])
    def prop(sizes: list[int], reads: list[tuple[int, float]]) -> None:
        run_echo(server.address, sizes, reads)

    prop()
    deadline = time.monotonic() + 2.0
    while server_descriptors(server.pid) > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server_descriptors(server.pid) <= before, (
        f"every client has gone, yet the server holds {server_descriptors(server.pid)} descriptors "
        f"(it had {before} before them): a connection is not closed")
    cpu = server_cpu(server.pid)
    time.sleep(0.3)
    cpu = server_cpu(server.pid) - cpu
    assert cpu < 0.1, (f"every client has gone, and the server used {cpu:.2f} s of CPU in 0.3 s: "
                       "it spins on a descriptor it should no longer wait for")


def test_partial_writes_pipelined_echoes_arrive_whole_in_order(servers: Any) -> None:
    stream_integrity_of_pipelined_echoes("epoll", servers)


def test_backpressure_pipelined_echoes_arrive_whole_in_order(servers: Any) -> None:
    stream_integrity_of_pipelined_echoes("poll", servers)


def test_edge_triggered_pipelined_echoes_arrive_whole_in_order(servers: Any) -> None:
    stream_integrity_of_pipelined_echoes("epoll-et", servers)
