# tests/conformance/test_cancellation.py
#
# Cancellation, the way libraries' own suites use it: a task that sleeps for
# ever cancelled by another, reads and writes cancelled half-way on TCP and
# UNIX streams (streams and protocols), the loop's sock_* coroutines
# cancelled, task groups cancelling their siblings, wait_for and timeout()
# expiring.  After each cancellation the connection must still work: a
# cancelled read loses no data, a cancelled drain leaves the writer usable.
# Source: the asyncio docs, "Coroutines and Tasks" (Task.cancel, TaskGroup,
# wait_for, timeout) and "Streams".
#
# Rules: every test runs its coroutine with conftest.run, bounded in time
# (a hang is a failure); servers listen on 127.0.0.1 or on a UNIX socket in
# a short temporary directory, and everything is closed in the test.

from __future__ import annotations

import asyncio
import math
import os
import socket
import sys
import tempfile
from collections.abc import Iterator

import pytest

from conformance.conftest import run

# Seconds a step that should happen at once may take before the test fails.
PROMPT = 5.0


@pytest.fixture
def unix_path() -> Iterator[str]:
    """A path for a UNIX socket, short enough for sun_path (108 bytes); removed after."""
    directory = tempfile.mkdtemp(prefix="tl-", dir="/tmp")
    path = os.path.join(directory, "s")
    yield path
    if os.path.exists(path):
        os.unlink(path)
    os.rmdir(directory)


async def _cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel ``task`` and wait for it; it must end cancelled."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, PROMPT)
    assert task.cancelled()


# -- Sleeps ------------------------------------------------------------------------------------

def test_an_infinite_sleep_is_cancelled_by_another_task(loop):
    async def main():
        sleeper = asyncio.ensure_future(asyncio.sleep(math.inf))
        await asyncio.sleep(0.01)
        assert not sleeper.done()
        asyncio.get_running_loop().call_later(0.02, sleeper.cancel)
        with pytest.raises(asyncio.CancelledError):
            await sleeper

    run(loop, main())


def test_many_infinite_sleeps_are_cancelled_together(loop):
    async def main():
        sleepers = [asyncio.ensure_future(asyncio.sleep(math.inf)) for _ in range(200)]
        await asyncio.sleep(0)
        for sleeper in sleepers:
            sleeper.cancel()
        results = await asyncio.gather(*sleepers, return_exceptions=True)
        assert all(isinstance(result, asyncio.CancelledError) for result in results)

    run(loop, main())


def test_a_cancelled_sleep_can_catch_and_finish(loop):
    async def sleeper():
        try:
            await asyncio.sleep(math.inf)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)   # cleanup that itself awaits
            return "cleaned up"

    async def main():
        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)
        task.cancel()
        assert await task == "cleaned up"
        assert not task.cancelled()

    run(loop, main())


def test_shield_keeps_the_inner_sleep_running(loop):
    async def main():
        inner = asyncio.ensure_future(asyncio.sleep(0.05, "inner done"))
        outer = asyncio.ensure_future(asyncio.shield(inner))
        await asyncio.sleep(0)
        await _cancel_and_wait(outer)
        assert await inner == "inner done"

    run(loop, main())


# -- wait_for and timeout() --------------------------------------------------------------------

def test_wait_for_an_infinite_sleep_times_out(loop):
    async def main():
        started = asyncio.get_running_loop().time()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(math.inf), 0.05)
        assert asyncio.get_running_loop().time() - started < PROMPT

    run(loop, main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is new in 3.11")
def test_timeout_context_cancels_the_block_and_raises_timeout_error(loop):
    async def main():
        reached = []
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await asyncio.sleep(math.inf)
                reached.append("after sleep")
        assert reached == []

    run(loop, main())


def test_wait_for_a_stream_read_times_out_and_the_stream_still_works(loop, listener):
    async def main():
        accepted = asyncio.get_running_loop().create_future()

        async def handle(reader, writer):
            accepted.set_result(writer)

        server = await asyncio.start_server(handle, sock=listener)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        peer = await asyncio.wait_for(accepted, PROMPT)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readline(), 0.05)
        peer.write(b"line\n")
        assert await asyncio.wait_for(reader.readline(), PROMPT) == b"line\n"
        writer.close()
        peer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    run(loop, main())


# -- Streams: cancelled reads and writes -------------------------------------------------------

async def _stream_pair(family: str, listener: socket.socket, unix_path: str):
    """(server, (reader, writer), (peer_reader, peer_writer)) over TCP or a UNIX socket."""
    accepted = asyncio.get_running_loop().create_future()

    async def handle(reader, writer):
        accepted.set_result((reader, writer))

    if family == "tcp":
        server = await asyncio.start_server(handle, sock=listener)
        client = await asyncio.open_connection(*listener.getsockname())
    else:
        server = await asyncio.start_unix_server(handle, path=unix_path)
        client = await asyncio.open_unix_connection(unix_path)
    peer = await asyncio.wait_for(accepted, PROMPT)
    return server, client, peer


async def _close_all(server, *writers) -> None:
    for writer in writers:
        writer.close()
    for writer in writers:
        try:
            await asyncio.wait_for(writer.wait_closed(), PROMPT)
        except (ConnectionError, BrokenPipeError):
            pass
    server.close()
    await asyncio.wait_for(server.wait_closed(), PROMPT)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_a_cancelled_stream_read_loses_no_data(loop, listener, unix_path, family):
    async def main():
        server, (reader, writer), (peer_reader, peer_writer) = \
            await _stream_pair(family, listener, unix_path)
        pending = asyncio.ensure_future(reader.read(100))
        await asyncio.sleep(0.02)
        await _cancel_and_wait(pending)
        peer_writer.write(b"after the cancel")
        assert await asyncio.wait_for(reader.readexactly(16), PROMPT) == b"after the cancel"
        # The other direction, and a second cancelled read on it.
        pending = asyncio.ensure_future(peer_reader.readline())
        await asyncio.sleep(0)
        await _cancel_and_wait(pending)
        writer.write(b"back\n")
        assert await asyncio.wait_for(peer_reader.readline(), PROMPT) == b"back\n"
        await _close_all(server, writer, peer_writer)

    run(loop, main())


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_many_reads_cancelled_in_a_row_then_eof(loop, listener, unix_path, family):
    async def main():
        server, (reader, writer), (_, peer_writer) = \
            await _stream_pair(family, listener, unix_path)
        for _ in range(50):
            pending = asyncio.ensure_future(reader.read(10))
            await asyncio.sleep(0)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
        peer_writer.write(b"x")
        peer_writer.write_eof()
        assert await asyncio.wait_for(reader.read(), PROMPT) == b"x"
        await _close_all(server, writer, peer_writer)

    run(loop, main())


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_a_cancelled_drain_leaves_the_writer_usable(loop, listener, unix_path, family):
    # The peer does not read: the writer's buffer passes its high-water mark
    # and drain() blocks; cancel it, then let the peer read everything.
    async def main():
        server, (reader, writer), (peer_reader, peer_writer) = \
            await _stream_pair(family, listener, unix_path)
        writer.transport.set_write_buffer_limits(high=1024)
        chunk = b"z" * 65536
        sent = 0
        drain = None
        for _ in range(400):
            writer.write(chunk)
            sent += len(chunk)
            drain = asyncio.ensure_future(writer.drain())
            await asyncio.sleep(0.001)
            if not drain.done():
                break
            await drain
        assert drain is not None and not drain.done(), "the peer's buffers never filled"
        await _cancel_and_wait(drain)
        writer.write(b"end")
        sent += 3
        received = await asyncio.wait_for(peer_reader.readexactly(sent), 3 * PROMPT)
        assert received.endswith(b"zend")
        await asyncio.wait_for(writer.drain(), PROMPT)
        await _close_all(server, writer, peer_writer)

    run(loop, main(), timeout=30)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_a_reader_task_cancelled_while_the_peer_writes(loop, listener, unix_path, family):
    # A consumer is cancelled mid-stream; a new consumer reads the rest:
    # together they see every byte, in order.
    async def main():
        server, (reader, writer), (_, peer_writer) = \
            await _stream_pair(family, listener, unix_path)
        got = bytearray()

        async def consume():
            while True:
                data = await reader.read(1000)
                if not data:
                    return
                got.extend(data)

        async def produce():
            for i in range(200):
                peer_writer.write(b"%05d" % i)
                await peer_writer.drain()
                await asyncio.sleep(0.001)
            peer_writer.write_eof()

        consumer = asyncio.ensure_future(consume())
        producer = asyncio.ensure_future(produce())
        while len(got) < 50:
            await asyncio.sleep(0.001)
        assert not producer.done()
        await _cancel_and_wait(consumer)
        await asyncio.wait_for(asyncio.gather(producer, consume()), PROMPT)
        assert bytes(got) == b"".join(b"%05d" % i for i in range(200))
        await _close_all(server, writer, peer_writer)

    run(loop, main())


# -- Protocols ---------------------------------------------------------------------------------

class _Recorder(asyncio.Protocol):
    def __init__(self):
        self.data = bytearray()
        self.lost = asyncio.get_running_loop().create_future()
        self.arrived = asyncio.Event()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data.extend(data)
        self.arrived.set()

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_a_task_waiting_on_a_protocol_is_cancelled_and_the_transport_goes_on(
        loop, listener, unix_path, family):
    async def main():
        loop = asyncio.get_running_loop()
        protocols = []

        def factory():
            protocols.append(_Recorder())
            return protocols[-1]

        if family == "tcp":
            server = await loop.create_server(factory, sock=listener)
            transport, client = await loop.create_connection(
                _Recorder, *listener.getsockname())
        else:
            server = await loop.create_unix_server(factory, unix_path)
            transport, client = await loop.create_unix_connection(_Recorder, unix_path)
        waiter = asyncio.ensure_future(client.arrived.wait())
        await asyncio.sleep(0.01)
        await _cancel_and_wait(waiter)
        for _ in range(100):
            if protocols:
                break
            await asyncio.sleep(0.01)
        protocols[0].transport.write(b"hello")
        await asyncio.wait_for(client.arrived.wait(), PROMPT)
        assert bytes(client.data) == b"hello"
        transport.close()
        await asyncio.wait_for(protocols[0].lost, PROMPT)
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_a_cancelled_create_connection_leaves_nothing_open(loop, listener):
    # Cancelled before the connection is made: the task ends cancelled, and
    # a new connection to the same server works.
    async def main():
        server = await asyncio.start_server(lambda r, w: w.close(), sock=listener)
        attempt = asyncio.ensure_future(asyncio.open_connection(*listener.getsockname()))
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(*listener.getsockname()), PROMPT)
        assert await asyncio.wait_for(reader.read(), PROMPT) == b""
        writer.close()
        server.close()
        await server.wait_closed()

    run(loop, main())


# -- The loop's sock_* coroutines --------------------------------------------------------------

def test_a_cancelled_sock_recv_does_not_steal_the_next_data(loop, pair):
    a, b = pair

    async def main():
        loop = asyncio.get_running_loop()
        pending = asyncio.ensure_future(loop.sock_recv(a, 100))
        await asyncio.sleep(0.01)
        await _cancel_and_wait(pending)
        b.send(b"data")
        assert await asyncio.wait_for(loop.sock_recv(a, 100), PROMPT) == b"data"
        # The same fd is watched again after the cancel: a reader can be added.
        got = loop.create_future()
        loop.add_reader(a, lambda: got.done() or got.set_result(a.recv(100)))
        b.send(b"more")
        assert await asyncio.wait_for(got, PROMPT) == b"more"
        loop.remove_reader(a)

    run(loop, main())


def test_a_cancelled_sock_sendall_leaves_the_socket_usable(loop, pair):
    a, b = pair

    async def main():
        loop = asyncio.get_running_loop()
        pending = asyncio.ensure_future(loop.sock_sendall(a, b"q" * (8 << 20)))
        await asyncio.sleep(0.02)
        assert not pending.done(), "8 MiB fit in the socket pair's buffers"
        await _cancel_and_wait(pending)
        # Drain what was sent, then the socket still sends.
        while True:
            try:
                if not b.recv(1 << 20):
                    break
            except BlockingIOError:
                break
        await asyncio.wait_for(loop.sock_sendall(a, b"after"), PROMPT)
        await asyncio.sleep(0.01)
        assert b.recv(100).endswith(b"after")

    run(loop, main())


def test_a_cancelled_sock_accept_then_an_accept_works(loop, listener):
    async def main():
        loop = asyncio.get_running_loop()
        pending = asyncio.ensure_future(loop.sock_accept(listener))
        await asyncio.sleep(0.01)
        await _cancel_and_wait(pending)
        client = socket.socket()
        client.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(client, listener.getsockname()), PROMPT)
            conn, _ = await asyncio.wait_for(loop.sock_accept(listener), PROMPT)
            conn.close()
        finally:
            client.close()

    run(loop, main())


# -- Task groups -------------------------------------------------------------------------------

needs_taskgroup = pytest.mark.skipif(sys.version_info < (3, 11),
                                     reason="asyncio.TaskGroup is new in 3.11")


@needs_taskgroup
def test_a_failing_child_cancels_its_infinitely_sleeping_siblings(loop):
    async def main():
        cancelled = []

        async def sleeper(i):
            try:
                await asyncio.sleep(math.inf)
            except asyncio.CancelledError:
                cancelled.append(i)
                raise

        async def fail():
            await asyncio.sleep(0.01)
            raise ValueError("boom")

        with pytest.raises(ExceptionGroup) as caught:
            async with asyncio.TaskGroup() as group:
                for i in range(5):
                    group.create_task(sleeper(i))
                group.create_task(fail())
        assert [type(e) for e in caught.value.exceptions] == [ValueError]
        assert sorted(cancelled) == list(range(5))

    run(loop, main())


@needs_taskgroup
def test_cancelling_the_task_around_a_task_group_cancels_its_children(loop):
    async def main():
        entered = asyncio.Event()
        cancelled = []

        async def child(i):
            try:
                await asyncio.sleep(math.inf)
            except asyncio.CancelledError:
                cancelled.append(i)
                raise

        async def body():
            async with asyncio.TaskGroup() as group:
                for i in range(3):
                    group.create_task(child(i))
                entered.set()

        outer = asyncio.ensure_future(body())
        await asyncio.wait_for(entered.wait(), PROMPT)
        await asyncio.sleep(0)
        await _cancel_and_wait(outer)
        assert sorted(cancelled) == [0, 1, 2]

    run(loop, main())


@needs_taskgroup
@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_a_task_group_of_readers_cancelled_by_a_timeout(loop, listener, unix_path, family):
    # Readers blocked on stream reads, in a task group inside timeout():
    # the timeout cancels them all, and TimeoutError comes out.
    async def main():
        server, (reader, writer), (peer_reader, peer_writer) = \
            await _stream_pair(family, listener, unix_path)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                async with asyncio.TaskGroup() as group:
                    group.create_task(reader.read(10))
                    group.create_task(peer_reader.read(10))
                    group.create_task(asyncio.sleep(math.inf))
        writer.write(b"still")
        assert await asyncio.wait_for(peer_reader.readexactly(5), PROMPT) == b"still"
        await _close_all(server, writer, peer_writer)

    run(loop, main())


@needs_taskgroup
def test_nested_task_groups_unwind_on_cancel(loop):
    async def main():
        order = []

        async def leaf(name):
            try:
                await asyncio.sleep(math.inf)
            finally:
                order.append(name)

        async def inner():
            async with asyncio.TaskGroup() as group:
                group.create_task(leaf("a"))
                group.create_task(leaf("b"))

        async def outer():
            async with asyncio.TaskGroup() as group:
                group.create_task(inner())
                group.create_task(leaf("c"))

        task = asyncio.ensure_future(outer())
        await asyncio.sleep(0.01)
        await _cancel_and_wait(task)
        assert sorted(order) == ["a", "b", "c"]

    run(loop, main())


# -- Executors and children --------------------------------------------------------------------

def test_a_cancelled_run_in_executor_returns_at_once(loop):
    import threading

    async def main():
        release = threading.Event()
        pending = asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        await asyncio.sleep(0.01)
        await _cancel_and_wait(pending)
        release.set()

    run(loop, main())


def test_a_cancelled_wait_for_a_child_process(loop):
    async def main():
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import time; time.sleep(60)")
        waiter = asyncio.ensure_future(process.wait())
        await asyncio.sleep(0.05)
        await _cancel_and_wait(waiter)
        process.kill()
        assert await asyncio.wait_for(process.wait(), PROMPT) == -9

    run(loop, main())


def test_a_cancelled_read_of_a_child_pipe_then_the_child_answers(loop):
    # A worker process on pipes (as process pools run them): a read of its
    # stdout is cancelled, then a request gets its answer on the same pipe.
    async def main():
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            "import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        pending = asyncio.ensure_future(process.stdout.readline())
        await asyncio.sleep(0.05)
        await _cancel_and_wait(pending)
        process.stdin.write(b"ping\n")
        await process.stdin.drain()
        assert await asyncio.wait_for(process.stdout.readline(), 3 * PROMPT) == b"PING\n"
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), PROMPT) == 0

    run(loop, main())


def test_waiting_for_readiness_with_add_reader_cancelled_many_times(loop):
    # The pattern of libraries that wait for readiness themselves (anyio's
    # UNIX socket streams): add_reader that resolves a future, await it,
    # remove_reader in finally; cancelled, then done again, many times.
    async def wait_readable(sock):
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(sock, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(sock)

    async def main():
        a, b = socket.socketpair(socket.AF_UNIX)
        a.setblocking(False)
        b.setblocking(False)
        try:
            for _ in range(100):
                pending = asyncio.ensure_future(wait_readable(a))
                await asyncio.sleep(0)
                pending.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await pending
            b.send(b"!")
            await asyncio.wait_for(wait_readable(a), PROMPT)
            assert a.recv(10) == b"!"
        finally:
            a.close()
            b.close()

    run(loop, main())
