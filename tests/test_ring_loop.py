"""tinyloop.ring's own tests: what a proactor must get right that a readiness loop never meets.

The conformance suite (tests/conformance/) runs the asyncio contract on
``ring`` beside the other loops, and tests/test_servers.py the HTTP stage.
Here: buffers the kernel holds (a paused transport's receive, a send the
kernel takes in pieces), cancellation as a request (close and a cancelled
sock_recv with their operations outstanding), the timer and the wake-up as
completions, a lone answer's send settled where it completes (one iteration
per exchange), the one-thread rule, and the one-line refusal where io_uring
is missing.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import subprocess
import sys
import threading
import weakref

import pytest

from tinyloop.ring.loop import refusal

REASON = refusal()  # io_uring refused, or its provided-buffer rings (before Linux 5.19): one line
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"ring: {REASON}")

if REASON is None:
    from tinyloop.ring import loop as ring_loop
    from tinyloop.ring.loop import RingSocketTransport

TIMEOUT = 10.0


def run(coro):
    return ring_loop.run(asyncio.wait_for(coro, TIMEOUT))


class Recorder(asyncio.Protocol):
    def __init__(self):
        self.data = bytearray()
        self.arrived = asyncio.Event()
        self.lost = asyncio.get_running_loop().create_future()
        self.paused = self.resumed = 0

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data
        self.arrived.set()

    def pause_writing(self):
        self.paused += 1

    def resume_writing(self):
        self.resumed += 1

    def connection_lost(self, exc):
        self.lost.set_result(exc)


async def connected_pair(protocol=Recorder):
    """A ring transport on one end of a socket pair, and the other end as a plain socket."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    transport, proto = await loop.create_connection(protocol, sock=ours)
    assert isinstance(transport, RingSocketTransport)
    return transport, proto, theirs


async def iterations(count):
    for _ in range(count):
        await asyncio.sleep(0)


def test_data_that_completes_while_paused_waits_for_resume_reading():
    # The receive was handed to the kernel before pause_reading: it cannot
    # be taken back, so its data must be kept, not delivered and not lost.
    async def main():
        transport, proto, peer = await connected_pair()
        await iterations(3)  # the first receive is outstanding
        transport.pause_reading()
        peer.send(b"while paused")
        await asyncio.sleep(0.05)
        assert proto.data == b"" and transport._pending == b"while paused"
        peer.send(b", and after")
        transport.resume_reading()
        assert proto.data == b""  # delivered from the ready queue, not inside resume_reading
        while proto.data != b"while paused, and after":
            proto.arrived.clear()
            await proto.arrived.wait()
        transport.close()
        peer.close()
        await proto.lost

    run(main())


def test_a_send_the_kernel_takes_in_pieces_goes_on_from_where_it_stopped():
    # 8 MiB to a peer that reads 64 KiB at a time: the kernel's socket
    # buffer takes a part per send, and the transport submits the rest.
    offsets = []

    class Spy(RingSocketTransport):
        def _send_from(self, data, offset):
            offsets.append(offset)
            super()._send_from(data, offset)

    async def main():
        loop = asyncio.get_running_loop()
        loop._make_socket_transport = lambda sock, protocol, waiter=None, **kw: Spy(
            loop, sock, protocol, waiter, kw.get("extra"), kw.get("server"))
        transport, proto, peer = await connected_pair()
        payload = bytes(range(256)) * (32 * 1024)
        transport.write(payload)
        assert transport.get_write_buffer_size() == len(payload)  # the kernel's until confirmed
        assert proto.paused == 1
        got = bytearray()
        while len(got) < len(payload):
            got += await loop.sock_recv(peer, 65536)
        await iterations(3)
        assert got == payload
        assert transport.get_write_buffer_size() == 0 and proto.resumed == 1
        assert any(offsets), "no send was partial: the test did not test continuation"
        assert offsets == sorted(offsets) or offsets.count(0) == 1
        transport.close()
        peer.close()
        await proto.lost

    run(main())


def test_writes_queued_behind_an_outstanding_send_arrive_in_order():
    async def main():
        loop = asyncio.get_running_loop()
        transport, proto, peer = await connected_pair()
        for i in range(200):
            transport.write(b"%04d," % i)
        transport.write_eof()  # after all of it, not before
        got = bytearray()
        while chunk := await loop.sock_recv(peer, 65536):
            got += chunk
        assert got == b"".join(b"%04d," % i for i in range(200))
        transport.close()
        peer.close()
        await proto.lost

    run(main())


def test_close_cancels_the_outstanding_receive_and_lets_the_transport_go():
    # close() asks the kernel to cancel the receive; the buffer stays alive
    # until that receive's own completion, and then nothing holds the transport.
    async def main():
        loop = asyncio.get_running_loop()
        proactor = loop._proactor
        idle = proactor.outstanding()
        transport, proto, peer = await connected_pair()
        await iterations(3)
        assert transport._recv_op in proactor._operations
        transport.close()
        await proto.lost
        for _ in range(20):
            if proactor.outstanding() == idle:
                break
            await asyncio.sleep(0.01)
        assert proactor.outstanding() == idle, "the cancelled receive never completed"
        assert peer.recv(10) == b""  # the peer sees the close
        ref = weakref.ref(transport)
        del transport, proto  # (the protocol holds its transport)
        gc.collect()
        assert ref() is None
        peer.close()

    run(main())


def test_a_cancelled_sock_recv_is_cancelled_in_the_kernel_too():
    async def main():
        loop = asyncio.get_running_loop()
        proactor = loop._proactor
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        idle = proactor.outstanding()
        task = asyncio.ensure_future(loop.sock_recv(ours, 100))
        await iterations(3)
        assert proactor.outstanding() == idle + 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await iterations(3)
        assert proactor.outstanding() == idle  # its -ECANCELED completion came
        theirs.send(b"next")
        assert await loop.sock_recv(ours, 100) == b"next"  # nobody else took it
        ours.close()
        theirs.close()

    run(main())


def test_one_wait_timer_at_a_time_however_many_timers_are_scheduled():
    # A timer is an operation (IORING_OP_TIMEOUT) that ends io_uring_enter's
    # wait; a nearer deadline replaces it (the old one is cancelled), a later
    # one reuses it.  So however the deadlines come, at most the armed timer
    # and one being cancelled are outstanding at any wait.
    from tinyloop.ring.proactor import Proactor
    from tinyloop.trace.instrument import Instrument

    async def main():
        loop = asyncio.get_running_loop()
        proactor = loop._proactor
        outstanding_timers = []

        class Timers(Instrument):
            def before_enter(self):  # each io_uring_enter: how many wait timers are armed
                outstanding_timers.append(sum(getattr(callback, "__func__", None) is Proactor._timer_fired
                                              for callback in proactor._operations.values()))

        loop.add_instrument(Timers())
        fired = []
        for delay in (0.4, 0.2, 0.1, 0.05, 0.3):
            loop.call_later(delay, fired.append, delay)
        start = loop.time()
        while len(fired) < 5:
            await asyncio.sleep(0.003)
        assert fired == [0.05, 0.1, 0.2, 0.3, 0.4]
        assert loop.time() - start < 1.0
        assert len(outstanding_timers) > 50 and max(outstanding_timers) <= 2

    run(main())


def test_call_soon_threadsafe_wakes_a_loop_waiting_in_io_uring_enter():
    async def main():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        enters = loop._proactor.ring.enters
        threading.Timer(0.1, loop.call_soon_threadsafe, (future.set_result, "woken")).start()
        assert await future == "woken"
        assert loop._proactor.ring.enters - enters < 10  # it waited, it did not spin

    run(main())


def test_the_loop_runs_only_in_the_thread_that_first_ran_it():
    loop = ring_loop.new_event_loop()
    try:
        def once():
            future = loop.create_future()
            loop.call_soon(future.set_result, None)
            loop.run_until_complete(future)

        thread = threading.Thread(target=once)
        thread.start()
        thread.join()
        with pytest.raises(RuntimeError, match="SINGLE_ISSUER"):
            once()
    finally:
        loop.close()


def test_where_io_uring_is_refused_the_loop_says_why_in_one_line():
    # The module imports anywhere (the book documents it); the package's
    # names refuse with ImportError, as for a loop that is not installed,
    # and making a Loop refuses with RuntimeError: both in one line.
    code = ("import tinyloop.raw.uring as u\n"
            "u.unavailable = lambda: 'io_uring is disabled here (a test)'\n"
            "import tinyloop.ring, tinyloop.ring.loop\n"
            "try:\n"
            "    tinyloop.ring.new_event_loop\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n"
            "tinyloop.ring.loop.Loop()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    reason = "tinyloop.ring needs io_uring, and io_uring is disabled here (a test)"
    assert result.stdout == f"ImportError: {reason}\n"
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"RuntimeError: {reason}"


def test_a_kernel_without_provided_buffer_rings_is_refused_in_one_line():
    # io_uring itself works, the provided-buffer ring's registration does
    # not (EINVAL before Linux 5.19): the loop says so, as for io_uring.
    code = ("import errno, tinyloop.raw.uring as u\n"
            "def refuse(*args, **kwargs):\n"
            "    raise OSError(errno.EINVAL, 'Invalid argument')\n"
            "u.BufferRing = refuse\n"
            "import tinyloop.ring.loop\n"
            "print(tinyloop.ring.loop.refusal())\n"
            "tinyloop.ring.loop.Loop()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    reason = ("tinyloop.ring needs provided-buffer rings (Linux 5.19), and this kernel refused one: "
              "Invalid argument")
    assert result.stdout == f"{reason}\n"
    assert result.stderr.strip().splitlines()[-1] == f"RuntimeError: {reason}"
    assert ring_loop.refusal() is None   # here, they are there


def test_addresses_round_trip_through_struct_sockaddr():
    for family, address in ((socket.AF_INET, ("127.0.0.1", 8080)),
                            (socket.AF_INET6, ("::1", 443, 0, 0)),
                            (socket.AF_INET6, ("fe80::1", 1, 7, 3))):
        raw = ring_loop.address_to_sockaddr(family, address)
        assert ring_loop.sockaddr_to_address(raw + bytes(128 - len(raw))) == address
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert ring_loop.sockaddr_to_address(
            ring_loop.address_to_sockaddr(socket.AF_INET, sock.getsockname())) == sock.getsockname()


def test_remove_shortcut_still_removes_what_was_registered():
    # The loop answers False at once for a descriptor the proactor never
    # registered (a transport's, at close); a reader or writer added is removed.
    async def main():
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        with left, right:
            assert loop._remove_reader(left.fileno()) is False
            loop.add_reader(left.fileno(), lambda: None)
            assert loop._remove_reader(left.fileno()) is True
            assert loop._remove_reader(left.fileno()) is False
            loop.add_reader(left, lambda: None)   # a file object goes the long way
            assert loop._remove_reader(left) is True
            assert loop._remove_writer(left.fileno()) is False   # the writer's side, the same way
            loop.add_writer(left.fileno(), lambda: None)
            assert loop._remove_writer(left.fileno()) is True

    run(main())


def test_an_accepted_connection_has_the_listeners_kind_and_its_peer_address():
    # The acceptor reads the listener's family, type and protocol once, as ints.
    async def main():
        loop = asyncio.get_running_loop()
        made = loop.create_future()

        class Made(asyncio.Protocol):
            def connection_made(self, transport):
                made.set_result(transport)

        server = await loop.create_server(Made, "127.0.0.1", 0)
        with socket.create_connection(server.sockets[0].getsockname()) as client:
            transport = await made
            sock = transport.get_extra_info("socket")
            listener = server.sockets[0]
            assert (sock.family, sock.type, sock.proto) == (listener.family, listener.type, listener.proto)
            assert (sock.family, sock.type) == (socket.AF_INET, socket.SOCK_STREAM)
            assert not sock.getblocking()
            assert transport.get_extra_info("peername") == client.getsockname()
            transport.close()
        server.close()
        await server.wait_closed()

    run(main())


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


def test_a_request_and_its_answer_cost_one_iteration_and_two_enters():
    # One client, one message at a time: the answer's send is done inside the
    # io_uring_enter that submits it, and its completion is settled where it
    # completes (RingSocketTransport._send_completed), so the loop does not
    # run an iteration for it; the same select waits on (Proactor.select).
    from tinyloop.trace.instrument import Instrument

    class Waits(Instrument):
        def __init__(self):
            self.waits = self.enters = 0

        def after_io_wait(self, events):
            self.waits += 1

        def after_enter(self, submitted):
            self.enters += 1

    exchanges, message = 50, b"x" * 1024

    def client(sock, answers):
        sock.settimeout(TIMEOUT)
        for _ in range(exchanges):
            sock.sendall(message)
            got = b""
            while len(got) < len(message):
                got += sock.recv(65536)
            answers.append(got)

    async def main():
        transport, _, theirs = await connected_pair(Echo)
        theirs.setblocking(True)
        loop, counter, answers = asyncio.get_running_loop(), Waits(), []
        loop.add_instrument(counter)
        done = loop.create_future()

        def exchange():
            try:
                client(theirs, answers)
            finally:
                loop.call_soon_threadsafe(done.set_result, None)

        thread = threading.Thread(target=exchange)
        thread.start()
        await done
        thread.join()
        loop.remove_instrument(counter)
        assert answers == [message] * exchanges
        assert transport.get_write_buffer_size() == 0
        transport.close()
        theirs.close()
        return counter

    counter = run(main())
    # (A few more: the thread's start, its end through the self-pipe.)  Before
    # the send was settled where it completes, this was two waits per exchange.
    # The enters are two per exchange, or one when the next request's
    # completion comes in the same enter as the answer's (a race the server
    # wins more often the faster it is).
    assert exchanges <= counter.waits <= exchanges + 10, counter.waits
    assert exchanges <= counter.enters <= 2 * exchanges + 10, counter.enters
