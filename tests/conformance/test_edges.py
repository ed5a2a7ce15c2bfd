# tests/conformance/test_edges.py
#
# The corners of the contract where loops tend to differ: ordering between
# the ready queue and due timers, interrupts out of run_forever, errors raised
# by protocols, resets, cancellation half-way through a connect, async
# generators that fail to close, thread checks in debug mode, and asyncio's
# streams under backpressure.  Each test names the asyncio behaviour it pins.

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import warnings

import pytest

from conformance.conftest import run
from conformance.test_connections import Collect, Echo, free_port_closed
from conformance.test_transports import Recorder, connect


@pytest.mark.differs(loops=("uvloop",), reason="libuv runs due timers before the callbacks "
                                              "queued with call_soon (its idle handles)")
def test_queued_callbacks_run_before_a_timer_that_became_due(loop):
    log = []
    loop.call_later(0, log.append, "timer")
    loop.call_soon(log.append, "soon")
    loop.call_later(0.001, loop.stop)
    loop.run_forever()
    assert log == ["soon", "timer"]


@pytest.mark.differs(loops=("uvloop",), reason="uvloop runs callbacks added while it runs the "
                                              "queue in the same iteration")
def test_a_callback_scheduled_while_running_waits_for_the_next_iteration(loop):
    log = []

    def first():
        log.append("first")
        loop.call_soon(log.append, "scheduled by first")

    loop.call_soon(first)
    loop.call_soon(log.append, "second")
    loop.call_soon(loop.stop)  # stops after this iteration: the new one waits
    loop.run_forever()
    assert log == ["first", "second"]
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert log == ["first", "second", "scheduled by first"]


def test_keyboard_interrupt_in_a_callback_leaves_run_forever_and_the_loop_usable(loop):
    def interrupt():
        raise KeyboardInterrupt

    loop.call_soon(interrupt)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    assert not loop.is_running()
    assert run(loop, asyncio.sleep(0, "still works")) == "still works"


def test_keyboard_interrupt_in_a_task_leaves_run_until_complete(loop):
    async def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(interrupt())
    assert run(loop, asyncio.sleep(0, "after")) == "after"


def test_run_until_complete_refuses_a_future_of_another_loop(loop):
    other = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError):
            loop.run_until_complete(other.create_future())
    finally:
        other.close()


def test_current_task_and_all_tasks_see_the_loops_tasks(loop):
    async def child():
        await asyncio.sleep(0.01)

    async def main():
        me = asyncio.current_task()
        task = asyncio.ensure_future(child())
        tasks = asyncio.all_tasks()
        await task
        return me in tasks and task in tasks and me.get_loop() is loop

    assert run(loop, main())


def test_create_task_refuses_a_non_coroutine(loop):
    with pytest.raises(TypeError):
        loop.create_task(lambda: None)


def test_in_debug_mode_call_soon_from_another_thread_raises(loop):
    loop.set_debug(True)
    errors = []

    def other_thread():
        try:
            loop.call_soon(print)
        except RuntimeError as exc:
            errors.append(exc)
        loop.call_soon_threadsafe(loop.stop)

    loop.call_soon(lambda: threading.Thread(target=other_thread).start())
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert len(errors) == 1


def test_an_error_in_data_received_closes_that_connection_and_reaches_the_handler(loop, listener):
    contexts = []
    loop.set_exception_handler(lambda loop, context: contexts.append(context))

    class Broken(Recorder):
        def data_received(self, data):
            super().data_received(data)
            raise ValueError("protocol bug")

    async def main():
        transport, protocol, peer = await connect(loop, listener, Broken())
        with peer:
            await loop.sock_sendall(peer, b"trigger")
            (exc,) = await protocol.wait_for("connection_lost")
        return exc

    exc = run(loop, main())
    assert isinstance(exc, ValueError)
    assert len(contexts) == 1 and contexts[0]["exception"] is exc
    assert "protocol" in contexts[0] and "transport" in contexts[0]


def test_a_reset_peer_gives_connection_lost_with_the_error_and_no_report(loop, listener):
    contexts = []
    loop.set_exception_handler(lambda loop, context: contexts.append(context))

    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder())
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()  # linger 0: RST
        (exc,) = await protocol.wait_for("connection_lost")
        return exc

    exc = run(loop, main())
    assert isinstance(exc, ConnectionResetError)
    assert contexts == []


@pytest.mark.differs(loops=("uvloop",), reason="uvloop's write() on a closed transport raises "
                                              "RuntimeError; asyncio ignores it (and logs after 5)")
def test_writing_to_a_peer_that_left_ends_in_connection_lost(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Recorder(keep_open=True))
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()
        for _ in range(100):
            if transport.is_closing():
                break
            transport.write(b"x" * 65536)
            await asyncio.sleep(0.01)
        await protocol.wait_for("connection_lost")
        transport.write(b"after loss")  # ignored, not raised
        return transport.is_closing()

    assert run(loop, main()) is True


def test_cancelling_create_connection_while_it_hangs_leaks_nothing(loop):
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    first = socket.create_connection(full.getsockname())

    async def main():
        attempt = asyncio.ensure_future(loop.create_connection(asyncio.Protocol, *full.getsockname()))
        await asyncio.sleep(0.05)
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt

    with first, full:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(loop, main())
            gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_an_async_generator_failing_to_close_reaches_the_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda loop, context: contexts.append(context))

    async def agen():
        try:
            yield 1
        finally:
            raise ValueError("in aclose")

    gen = agen()

    async def start():  # first iterated inside the loop, so the loop's hook records it
        await gen.__anext__()

    loop.run_until_complete(start())
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert len(contexts) == 1 and isinstance(contexts[0]["exception"], ValueError)
    assert "asyncgen" in contexts[0]


def test_sock_connect_resolves_a_name(loop, listener):
    async def main():
        client = socket.socket()
        client.setblocking(False)
        with client:
            await loop.sock_connect(client, ("localhost", listener.getsockname()[1]))
            return client.getpeername()

    assert run(loop, main()) == listener.getsockname()


def test_streams_echo_with_drain_under_backpressure(loop):
    payload = b"line of text\n" * 200_000  # 2.6 MB

    async def handle(reader, writer):
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())

        async def send():
            writer.write(payload)
            await writer.drain()
            writer.write_eof()

        sending = asyncio.ensure_future(send())
        received = await reader.read()
        await sending
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return received

    assert run(loop, main()) == payload


def test_datagram_transport_abort_and_buffer_size(loop):
    class Quiet(asyncio.DatagramProtocol):
        def connection_made(self, transport):
            self.lost = asyncio.get_running_loop().create_future()

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        transport, protocol = await loop.create_datagram_endpoint(
            Quiet, local_addr=("127.0.0.1", 0))
        size = transport.get_write_buffer_size()
        transport.abort()
        return size, await protocol.lost, transport.is_closing()

    assert run(loop, main()) == (0, None, True)


@pytest.mark.differs(loops=("uvloop",), reason="uvloop's serve_forever() goes on after close() "
                                              "(until its own task is cancelled)")
def test_server_close_during_serve_forever_ends_it_with_cancelled_error(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        server.close()
        done, _ = await asyncio.wait([serving], timeout=5)
        assert done, "serve_forever() went on after close()"
        with pytest.raises(asyncio.CancelledError):
            serving.result()
        return list(server.sockets)

    assert run(loop, main()) == []


def test_serve_forever_on_a_closed_server_raises_runtime_error(loop):
    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        server.close()
        await server.wait_closed()
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(server.serve_forever(), 1)

    run(loop, main())


def test_transport_after_close_is_not_reading(loop, listener):
    async def main():
        transport, protocol, peer = await connect(loop, listener, Collect())
        with peer:
            transport.close()
            reading = transport.is_reading()
            transport.pause_reading()  # harmless on a closing transport
            transport.resume_reading()
            await protocol.lost
        return reading

    assert run(loop, main()) is False


def test_create_connection_refused_error_names_no_leaked_socket(loop):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with pytest.raises(OSError):
                run(loop, loop.create_connection(asyncio.Protocol, *free_port_closed()))
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
