"""tinyloop.ring on its two cores: the pure-Python ring (ctypes) and the Cython one (liburing).

tinyloop/ring/core.py picks the core; tests/test_ring_loop.py and the
conformance suite run the default one (Cython where it is built).  Here:
the choice itself (default, TINYLOOP_RING_CORE, the ``core`` argument, a
clear refusal), the proactor's own tests from test_ring_loop.py on each
core, and what the C ring must do as the Python one does: signals and
EINTR around its wait, a full submission queue, the table entry of a
multishot operation kept until its last completion, a bytes object's
address.  Cython-only tests skip where the extension is not built, saying so.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tinyloop.ring.loop import refusal

REASON = refusal()  # io_uring refused, or its provided-buffer rings (before Linux 5.19): one line
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"ring: {REASON}")

if REASON is None:
    import test_ring_loop as base  # tests/ is on sys.path

    from tinyloop.raw import uring
    from tinyloop.ring import core
    from tinyloop.ring import loop as ring_loop
    from tinyloop.ring.proactor import IORING_OP_NOP, pin

NOT_BUILT = "tinyloop.ring's Cython core is not built here (setup.py needs liburing's headers)"
IORING_TIMEOUT_MULTISHOT = 1 << 6  # <linux/io_uring.h>, 6.4: a timeout that fires ``count`` times


@pytest.fixture(params=["python", "cython"])
def ring_core(request, monkeypatch):
    """Each core in turn, through the environment variable a user would set."""
    if request.param == "cython" and not core.built():
        pytest.skip(NOT_BUILT)
    monkeypatch.setenv(core.ENVIRONMENT, request.param)
    return request.param


@pytest.fixture
def cython_core(monkeypatch):
    """The Cython core, forced through the environment variable; skipped where it is not built."""
    if not core.built():
        pytest.skip(NOT_BUILT)
    monkeypatch.setenv(core.ENVIRONMENT, "cython")


def ring_types():
    return {"python": uring.Ring, "cython": core._uring.Ring if core.built() else None}


# -- Choosing the core -----------------------------------------------------------------


@pytest.mark.parametrize("env, argument, expected", [
    (None, None, "default"), ("python", None, "python"), ("cython", None, "cython"),
    ("cython", "python", "python"), (None, "python", "python"), ("python", "cython", "cython")])
def test_the_default_core_is_cython_where_built_and_either_can_be_forced(monkeypatch, env, argument, expected):
    if expected == "default":
        expected = "cython" if core.built() else "python"
    elif expected == "cython" and not core.built():
        pytest.skip(NOT_BUILT)
    if env is None:
        monkeypatch.delenv(core.ENVIRONMENT, raising=False)
    else:
        monkeypatch.setenv(core.ENVIRONMENT, env)
    loop = ring_loop.Loop(core=argument)
    try:
        assert loop.core == expected
        loop.run_until_complete(asyncio.sleep(0))
        assert type(loop._proactor.ring) is ring_types()[expected]  # the ring it really runs on
    finally:
        loop.close()


def test_an_unknown_core_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(core.ENVIRONMENT, "rust")
    with pytest.raises(ValueError, match=r"one of cython, python, not 'rust'.*TINYLOOP_RING_CORE"):
        ring_loop.Loop()


def test_without_the_extension_the_loop_runs_in_python_and_cython_is_refused_saying_why():
    code = ("import sys\n"
            "sys.modules['tinyloop.ring._uring'] = None  # as if it were not built\n"
            "import asyncio, tinyloop.ring\n"
            "from tinyloop.ring import loop\n"
            "made = loop.Loop()\n"
            "print(tinyloop.ring.run(asyncio.sleep(0, 'ran')), made.core)\n"
            "made.close()\n"
            "loop.Loop(core='cython')\n")
    env = {k: v for k, v in os.environ.items() if k != "TINYLOOP_RING_CORE"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert result.stdout == "ran python\n"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: tinyloop.ring's Cython core is not built in this installation")
    assert "apt-get install liburing-dev" in last


# -- The proactor's own tests, on each core ---------------------------------------------


KEY_TESTS = [
    base.test_data_that_completes_while_paused_waits_for_resume_reading,
    base.test_a_send_the_kernel_takes_in_pieces_goes_on_from_where_it_stopped,
    base.test_writes_queued_behind_an_outstanding_send_arrive_in_order,
    base.test_close_cancels_the_outstanding_receive_and_lets_the_transport_go,
    base.test_a_cancelled_sock_recv_is_cancelled_in_the_kernel_too,
    base.test_one_wait_timer_at_a_time_however_many_timers_are_scheduled,
    base.test_call_soon_threadsafe_wakes_a_loop_waiting_in_io_uring_enter,
] if REASON is None else []


@pytest.mark.parametrize("test", KEY_TESTS, ids=lambda test: test.__name__[5:])
def test_the_proactor_tests_pass_on_each_core(ring_core, test):
    test()


def test_tcp_echo_through_a_server_on_each_core(ring_core):
    # The hot path the Cython core is for: accept, receive, send, close,
    # 1 KiB messages on a few connections at once.
    async def main():
        loop = asyncio.get_running_loop()
        assert loop.core == ring_core

        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        completed = loop._proactor.ring.completed

        async def client(number):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for i in range(50):
                message = bytes([number, i % 256]) * 512
                writer.write(message)
                assert await reader.readexactly(len(message)) == message
            writer.close()
            await writer.wait_closed()

        await asyncio.gather(*(client(n) for n in range(4)))
        server.close()
        await server.wait_closed()
        return loop._proactor.ring.completed - completed

    completions = base.run(main())
    assert completions >= 4 * 50 * 2  # at least a receive and a send per message, reaped by this ring


# -- The ring's wait: signals and EINTR ---------------------------------------------------


class Alarm(Exception):
    pass


def signal_main_thread(signum, delay=0.2):
    """Send ``signum`` to this (the main) thread after ``delay`` seconds, from another thread.

    pthread_kill, not kill: a signal sent to the process may be taken by
    any thread, and only the main thread's wait is ended by it.  (Not
    SIGALRM: pytest-timeout's timer is SIGALRM.)
    """
    timer = threading.Timer(delay, signal.pthread_kill, (threading.main_thread().ident, signum))
    timer.start()
    return timer


@pytest.mark.parametrize("name", ["python", "cython"])
def test_a_signal_handler_runs_inside_the_wait_and_its_exception_ends_it(name):
    # Nothing is submitted and one completion is awaited: only the signal
    # can end this wait.  The handler's exception must come out of the
    # call itself (PyErr_CheckSignals after the wait), not an
    # InterruptedError with the handler run later, and not a wait that
    # retries EINTR forever.
    if ring_types()[name] is None:
        pytest.skip(NOT_BUILT)
    ring = ring_types()[name](8)

    def alarm(signum, frame):
        raise Alarm

    previous = signal.signal(signal.SIGUSR1, alarm)
    try:
        soon = signal_main_thread(signal.SIGUSR1)
        started = time.monotonic()
        with pytest.raises(Alarm) as caught:
            ring.submit_and_wait(1)
        assert caught.value.__context__ is None
        assert time.monotonic() - started < 5
        soon.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        ring.close()


@pytest.mark.parametrize("name", ["python", "cython"])
def test_a_signal_whose_handler_returns_ends_the_wait_with_eintr_after_the_handler_ran(name):
    if ring_types()[name] is None:
        pytest.skip(NOT_BUILT)
    ring = ring_types()[name](8)
    ran = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: ran.append(signum))
    try:
        soon = signal_main_thread(signal.SIGUSR1)
        with pytest.raises(InterruptedError):
            ring.submit_and_wait(1)
        assert ran == [signal.SIGUSR1]
        soon.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        ring.close()


def test_ctrl_c_reaches_a_loop_waiting_in_the_ring(ring_core):
    # asyncio.Runner's SIGINT handler cancels the main task; the loop must
    # hear the signal while it waits in io_uring_enter, on either core.
    soon = signal_main_thread(signal.SIGINT)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ring_loop.run(asyncio.sleep(30))
    assert time.monotonic() - started < 10
    soon.join()


# -- The ring's queues ---------------------------------------------------------------------


def test_more_submissions_than_the_queue_holds_are_all_submitted(ring_core):
    # A four-entry SQ and twelve operations prepared before one wait: each
    # full queue is submitted to make room (Ring.prep, Ring._sqe); the
    # sixteen-entry CQ holds all their completions.
    proactor = core.proactor_type()[1](entries=4)
    results = []
    try:
        for _ in range(12):
            proactor.ring.prep(IORING_OP_NOP, -1, user_data=proactor._submission(
                lambda res, flags: results.append(res)))
        for _ in range(20):
            if len(results) == 12:
                break
            proactor.select(0)
        assert results == [0] * 12 and proactor.outstanding() == 0
    finally:
        proactor.close()


def test_a_multishot_operation_keeps_its_callback_until_its_last_completion(ring_core):
    # A timeout that fires three times: the first two CQEs carry
    # IORING_CQE_F_MORE and must leave the table entry (and so the
    # callback, and what it keeps alive) in place; the third removes it.
    proactor = core.proactor_type()[1](entries=8)
    seen = []
    try:
        interval = uring.timespec(0.005)
        address, pinned = pin(interval)
        user_data = proactor._submission(lambda res, flags: seen.append(
            (res, bool(flags & uring.CQE_F_MORE), user_data in proactor._operations)))
        proactor.ring.prep(uring.IORING_OP_TIMEOUT, -1, addr=address, length=1, offset=3,
                           op_flags=IORING_TIMEOUT_MULTISHOT, user_data=user_data)
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            proactor.select(0.05)
        del pinned
        etime = -62  # ETIME: a timeout's result when it expires
        assert seen == [(etime, True, True), (etime, True, True), (etime, False, False)]
    finally:
        proactor.close()


def test_a_bytes_address_is_the_same_from_c_as_from_ctypes():
    if not core.built():
        pytest.skip(NOT_BUILT)
    data = b"the kernel reads these bytes"
    address = core._uring.bytes_address(data)
    assert address == uring.bytes_address(data)
    assert ctypes.string_at(address, len(data)) == data
    with pytest.raises(TypeError):
        core._uring.bytes_address(bytearray(data))  # not immutable: its buffer may move


def test_a_closed_c_ring_refuses_instead_of_touching_freed_memory():
    if not core.built():
        pytest.skip(NOT_BUILT)
    ring = core._uring.Ring(8)
    ring.close()
    ring.close()  # idempotent
    for call in (lambda: ring.prep_recv(0, 0, 0, 1), lambda: ring.submit_and_wait(0)):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert ring.complete({}) == 0


def test_the_c_transport_holds_its_objects_and_the_collector_frees_a_cycle_through_them():
    # StreamCore's object fields, with its hand-written allocation, traversal,
    # clearing and deallocation (tinyloop/ring/fast.pyx): a new one reads
    # None in each; a cycle that runs only through those fields is found and
    # freed by the cyclic collector, and what they held is released with it.
    if not core.built():
        pytest.skip(NOT_BUILT)
    import gc
    import weakref

    class Held:
        pass

    stream = core._uring.StreamCore.__new__(core._uring.StreamCore)
    assert (stream._loop, stream._protocol, stream._send_handle) == (None, None, None)
    held = Held()
    stream._protocol = held
    stream._loop = stream          # the cycle, through C fields alone
    stream._buffer = [stream]      # and one through a list
    gone = weakref.ref(held)
    del stream, held
    gc.collect()
    assert gone() is None, "the cycle through StreamCore's fields was not collected"


def test_a_transport_on_the_c_core_keeps_its_objects_in_c_fields_not_its_dict(cython_core):

    async def main():
        transport, proto, peer = await base.connected_pair()
        try:
            assert type(transport).__name__ == "CythonSocketTransport"
            fields = {"_loop", "_protocol", "_sock", "_buffer", "_proactor", "_recv_handle"}
            assert fields.isdisjoint(vars(transport)), fields & set(vars(transport))
            assert transport._protocol is proto and transport._loop is asyncio.get_running_loop()
            assert type(transport._recv_handle).__name__ == "TransportHandle"
        finally:
            transport.close()
            peer.close()
            await proto.lost

    base.run(main())


async def until(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_data_received_is_looked_up_once_a_protocol_and_let_go_with_the_protocol(cython_core):
    # StreamCore keeps the protocol's bound data_received (fast.pyx,
    # _data_received_c): a new protocol (set_protocol) must get the next
    # data, and the connection's end must drop it with the protocol, or the
    # protocol, which holds its transport, would be kept by a reference
    # cycle until the cyclic collector ran (disabled here).
    import gc
    import weakref

    async def main():
        transport, first, peer = await base.connected_pair()
        peer.send(b"one")
        await until(lambda: first.data == b"one")
        second = base.Recorder()
        second.transport = transport
        transport.set_protocol(second)
        peer.send(b"two")
        await until(lambda: second.data == b"two")
        assert first.data == b"one"
        transport.close()
        peer.close()
        await second.lost
        return weakref.ref(second)

    gc.collect()
    gc.disable()
    try:
        gone = base.run(main())
        assert gone() is None, "the closed transport still holds its protocol"
    finally:
        gc.enable()


def test_receives_that_find_every_provided_buffer_taken_ask_again_and_lose_nothing(ring_core, monkeypatch):
    # Two provided buffers and six connections whose data all arrives in
    # one wait: four receives complete with -ENOBUFS (nothing received)
    # and must be submitted again, on each core, until all six got theirs.
    from tinyloop.ring.proactor import Proactor

    monkeypatch.setattr(Proactor, "buffer_count", 2)
    monkeypatch.setattr(Proactor, "buffer_size", 4096)

    async def main():
        pairs = [await base.connected_pair() for _ in range(6)]
        await asyncio.sleep(0.01)   # every receive outstanding
        for n, (_, _, peer) in enumerate(pairs):
            peer.send(b"%d:" % n + b"x" * 5000)   # more than a buffer: two receives each, at least
        await until(lambda: all(len(proto.data) == len(b"%d:" % n) + 5000
                                for n, (_, proto, _) in enumerate(pairs)))
        for n, (transport, proto, peer) in enumerate(pairs):
            assert bytes(proto.data) == b"%d:" % n + b"x" * 5000
            assert transport.get_extra_info("socket") is not None
            transport.close()
            peer.close()
        assert asyncio.get_running_loop()._proactor.buffers.count == 2

    base.run(main())


def test_an_idle_connection_holds_no_receive_buffer_of_its_own(ring_core):
    # The receive waits with no buffer; the loop's provided buffers are
    # the only ones, however many connections are open.
    async def main():
        pairs = [await base.connected_pair() for _ in range(20)]
        await asyncio.sleep(0.01)
        proactor = asyncio.get_running_loop()._proactor
        assert all(transport._recv_op for transport, _, _ in pairs)   # each has a receive outstanding
        # (Part III's _recv_view is the loop's one read buffer, shared, unused here.)
        held = {id(value.obj if isinstance(value, memoryview) else value) for transport, _, _ in pairs
                for value in vars(transport).values() if isinstance(value, (bytearray, memoryview))}
        assert len(held) <= 1, "connections hold buffers of their own"
        assert proactor.buffers.count == proactor.buffer_count
        for transport, _, peer in pairs:
            transport.close()
            peer.close()

    base.run(main())


def test_a_transports_receive_is_held_in_a_slot_and_a_stale_user_data_finds_nothing(cython_core):
    # On the cython core the proactor's table (fast.pyx's Operations) keeps a
    # transport's receives and sends in slots, not in its dict.  The rules are
    # the dict's: the entry is there until the final CQE, each receive has a
    # fresh user_data, and a stale one (kept for a cancel) finds nothing, so
    # cancelling it cannot reach the receive that took its slot.

    async def main():
        proactor = asyncio.get_running_loop()._proactor
        transport, proto, peer = await base.connected_pair()
        try:
            await base.iterations(3)
            first = transport._recv_op
            table = proactor._operations
            assert first >> 63 == 1, f"{first:#x} is not a held operation's user_data"
            assert first in table and table[first] is transport._on_recv
            assert transport._on_recv in table.values() and transport._on_recv.user_data == first
            peer.send(b"one")
            await until(lambda: proto.data == b"one")
            second = transport._recv_op
            assert second != first and second in table
            assert first not in table and table.get(first) is None
            with pytest.raises(KeyError):
                table[first]
            outstanding = proactor.outstanding()
            proactor.cancel(first)          # stale: no cancel is prepared
            await base.iterations(3)
            assert proactor.outstanding() == outstanding and transport._recv_op == second
            peer.send(b", two")
            await until(lambda: proto.data == b"one, two")
        finally:
            transport.close()
            peer.close()
            await proto.lost

    base.run(main())


def test_closing_the_loop_lets_go_of_a_transport_whose_receive_was_held(cython_core):
    # The table holds a TransportCompletion (and through it the transport and
    # its buffer) while the kernel may write into the buffer; once the loop is
    # closed, its ring with it, nothing must hold them any more.
    import gc
    import weakref

    loop = ring_loop.new_event_loop()
    try:
        transport, proto, peer = loop.run_until_complete(base.connected_pair())
        loop.run_until_complete(base.iterations(3))
        assert transport._recv_op in loop._proactor._operations
    finally:
        loop.close()
    assert loop._proactor.outstanding() == 0
    gone = weakref.ref(transport)
    peer.close()
    del transport, proto, loop
    gc.collect()
    assert gone() is None, "the closed loop's table still holds the transport"


def test_call_soon_in_c_makes_part_threes_handle_with_every_field_set(cython_core):
    # LoopCore.call_soon writes a Handle's six fields at their __slots__
    # offsets (fast.pyx): read back by name, each is what Handle.__init__ sets.
    import contextvars

    from tinyloop.aio.events import Handle

    loop = ring_loop.new_event_loop()
    try:
        context = contextvars.copy_context()
        handle = loop.call_soon(print, "a", "b", context=context)
        assert type(handle) is Handle
        assert (handle._context, handle._callback, handle._args) == (context, print, ("a", "b"))
        assert (handle._cancelled, handle._loop, handle._repr) == (False, loop, None)
        assert handle.get_context() is context
        bare = loop.call_soon(int)
        assert bare._args == () and isinstance(bare._context, contextvars.Context)
        handle.cancel()
        bare.cancel()
        assert handle._callback is None and handle.cancelled()
    finally:
        loop.close()


def test_run_once_in_c_runs_iterations_until_stop_as_part_fours_does(cython_core):
    # LoopCore.run_once runs Part II's iterations itself until _stopping is
    # set (run_forever's Python loop turns once a run): a chain of callbacks,
    # each queued by the one before, so each in an iteration of its own, all
    # run in one call, which returns after the iteration that asked for stop().
    loop = ring_loop.new_event_loop()
    try:
        ran = []

        def step(n):
            ran.append(n)
            if n < 5:
                loop.call_soon(step, n + 1)
            else:
                loop.stop()

        loop.call_soon(step, 1)
        loop.run_once()
        assert ran == [1, 2, 3, 4, 5] and loop._stopping
        loop._stopping = False
    finally:
        loop.close()


def test_an_instrument_added_while_the_c_iteration_runs_gets_part_twos_hooks(cython_core):
    # The C iteration has no instrument hooks: one added by a callback must
    # make run_once return, so that run_forever's next call runs Part II's
    # iteration, which calls them.
    loop = ring_loop.new_event_loop()
    try:
        waits = []

        class Waits:
            def before_io_wait(self, timeout):
                waits.append(timeout)

        def later():
            loop.call_soon(loop.stop)

        loop.call_soon(loop.add_instrument, Waits())
        loop.call_soon(later)
        loop.run_forever()
        assert waits, "no iteration after the instrument was added called its hook"
    finally:
        loop.close()


def test_a_signal_that_comes_while_c_callbacks_run_is_handled_before_the_loop_waits(cython_core):
    # The callback is C's raise(3), through ctypes: unlike signal.raise_signal,
    # which runs the handler itself before it returns, it leaves the handler
    # due, and no Python code runs after it; then nothing is ready, and the
    # loop would wait until another thread wakes it, two seconds on (not a
    # timer: the timer heap's upkeep is Python code, which would run the
    # handler).  It must run before that wait (ProactorCore's select).
    raise_signal_in_c = getattr(ctypes.CDLL(None), "raise")

    def alarm(signum, frame):
        raise Alarm

    loop = ring_loop.new_event_loop()
    previous = signal.signal(signal.SIGUSR1, alarm)
    try:
        loop.call_soon(raise_signal_in_c, int(signal.SIGUSR1))
        waker = threading.Timer(2.0, loop.call_soon_threadsafe, (loop.stop,))
        waker.start()
        started = time.monotonic()
        with pytest.raises(Alarm):
            loop.run_forever()
        assert time.monotonic() - started < 1.0, "the handler waited for the next completion"
        waker.cancel()
        waker.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        loop.close()


def test_a_handle_that_ran_is_reused_only_when_nothing_else_holds_it(cython_core):
    # LoopCore keeps a handle that ran for call_soon to reuse (fast.pyx,
    # _keep_spare), emptied: only if the ready queue's was its one
    # reference.  One the caller kept, or that a weak reference points to,
    # must stay as it was.
    import weakref

    loop = ring_loop.new_event_loop()
    try:
        ran = []
        kept = loop.call_soon(ran.append, "kept")
        watched = weakref.ref(loop.call_soon(ran.append, "watched"))
        loop.call_soon(ran.append, "dropped")
        loop.call_soon(loop.stop)
        spares = loop._spare_count
        loop.run_forever()
        assert ran == ["kept", "watched", "dropped"]
        # the dropped one and stop's were kept; the other two were left alone
        assert loop._spare_count == spares + 2
        assert kept._callback == ran.append and kept._args == ("kept",) and kept._loop is loop
        assert watched() is None or watched()._args == ("watched",)
        again = loop.call_soon(ran.append, "again")
        assert loop._spare_count == spares + 1 and again is not kept
        assert (again._callback, again._args, again._loop, again._cancelled) == (ran.append, ("again",), loop, False)
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert ran[-1] == "again"
    finally:
        loop.close()


def test_a_ready_queue_that_subclasses_deque_has_its_own_methods_called(cython_core):
    # fast.pyx calls deque's append and popleft as C functions on a deque
    # exactly; a subclass's overrides must still run.
    import collections

    class Counted(collections.deque):
        appended = popped = 0

        def append(self, item):
            Counted.appended += 1
            super().append(item)

        def popleft(self):
            Counted.popped += 1
            return super().popleft()

    loop = ring_loop.new_event_loop()
    try:
        loop._ready = Counted(loop._ready)
        log = []
        loop.call_soon(log.append, 1)
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert log == [1] and Counted.appended >= 2 and Counted.popped >= 2
    finally:
        loop.close()
