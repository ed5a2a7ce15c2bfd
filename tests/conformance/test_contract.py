# tests/conformance/test_contract.py
#
# Corners of asyncio's contract that held-out suites (asyncio's own tests,
# uvloop's, a widely used library's) found tinyloop's loops breaking
# (issue 18): a fork child that cannot run a loop, a retry that never looks
# at the socket again, a failed connection that leaves a reference cycle,
# arguments refused with another exception or message than asyncio's.
# asyncio on the running Python is the reference for every one.
#
# Rules: as the rest of the suite (conftest.py); a test that forks waits
# for its child with a timeout and kills it if it must, so a hang fails.

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import socket
import ssl
import sys
import tempfile
import threading
import time
import weakref
import warnings

import pytest

from conformance.conftest import loop_package, run


# -- Fork -------------------------------------------------------------------------------

def _child_runs_a_loop(policy: asyncio.AbstractEventLoopPolicy, conn) -> None:
    """In the fork child: asyncio.run with the parent's policy, result down ``conn``."""
    async def main():
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()).__name__

    try:
        conn.send(("ok", asyncio.run(main())))
    except BaseException as exc:  # noqa: BLE001 - the parent reports whatever it was
        conn.send(("error", repr(exc)))
    finally:
        conn.close()


def _answer(receive) -> tuple[str, str]:
    """The child's answer, or an error after 10 s (in a thread: these calls block)."""
    return receive.recv() if receive.poll(10) else ("error", "no answer from the child")


def _policy(package):
    return asyncio.DefaultEventLoopPolicy() if package is asyncio else package.EventLoopPolicy()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork(2)")
def test_a_child_forked_inside_the_running_loop_runs_a_loop_of_its_own(loop_name, loop):
    """multiprocessing's fork child calls asyncio.run: the parent's running loop is not
    "running" in the child (asyncio clears its slot with os.register_at_fork)."""
    package = loop_package(loop_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # policies, from 3.14
        old = asyncio.get_event_loop_policy()
        policy = _policy(package)
        asyncio.set_event_loop_policy(policy)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    async def main():
        child = context.Process(target=_child_runs_a_loop, args=(policy, send))
        child.start()  # fork(2) from inside a callback of the running loop
        send.close()
        try:
            return await loop.run_in_executor(None, _answer, receive)
        finally:
            await loop.run_in_executor(None, child.join, 10)
            if child.is_alive():
                child.kill()
                child.join()

    try:
        answer = run(loop, main())
    finally:
        receive.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_event_loop_policy(old)
    assert answer[0] == "ok", answer[1]


# -- sock_* retries ----------------------------------------------------------------------

class _SwappingSocket:
    """A stand-in for a socket whose ``sendto`` refuses (EAGAIN) until the loop swaps
    in the real one, as asyncio's own test does with a Mock: a retry must look the
    method up again, not keep calling the first one it found."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.fileno = sock.fileno
        self.gettimeout = sock.gettimeout

    def sendto(self, data, address):
        raise BlockingIOError


@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no sock_sendto/sock_recvfrom/"
                                              "sock_recvfrom_into (NotImplementedError)")
def test_sock_sendto_retries_with_the_sockets_method_of_the_moment(loop):
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sender, receiver:
        for sock in (sender, receiver):
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
        stand_in = _SwappingSocket(sender)
        loop.call_soon(setattr, stand_in, "sendto", sender.sendto)

        async def main():
            sent = await loop.sock_sendto(stand_in, b"\x01" * 4096, receiver.getsockname())
            return sent, await loop.sock_recvfrom(receiver, 8192)

        sent, (data, address) = run(loop, main(), timeout=5)
    assert sent == 4096 and data == b"\x01" * 4096


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")
@pytest.mark.differs(loops=("uvloop",), reason="uvloop has no sock_sendto/sock_recvfrom/"
                                              "sock_recvfrom_into (NotImplementedError)")
def test_sock_sendto_waits_for_a_full_receive_queue_to_drain(loop):
    """A UNIX datagram receiver whose queue is full: sendto(2) says EAGAIN, and
    sock_sendto completes once the receiver reads."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "receiver")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with receiver, sender:
            receiver.bind(path)
            for sock in (receiver, sender):
                sock.setblocking(False)
            queued = 0
            with pytest.raises(BlockingIOError):
                for queued in range(1, 100_000):
                    sender.sendto(b"x" * 1000, path)

            def drain():
                while True:
                    try:
                        receiver.recv(2000)
                    except BlockingIOError:
                        return

            async def main():
                loop.call_later(0.05, drain)
                return await loop.sock_sendto(sender, b"y" * 1000, path)

            assert run(loop, main(), timeout=5) == 1000
            assert queued > 1


# -- A failed connection leaves no reference cycle --------------------------------------

def test_a_failed_connection_leaves_no_reference_cycle(loop):
    """After create_connection to a closed port, nothing but us holds the error: not a
    list of the attempts' errors, not a future, kept alive by the frames of the error's
    own traceback (asyncio clears those locals in ``finally``).  Happy Eyeballs is
    left out: asyncio 3.11's staggered_race keeps such a cycle itself."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()

    caught = []

    async def main():
        # Handed out through a list, not as main's result, which its task
        # would hold (and on 3.12+ keep until the cyclic GC runs).
        try:
            await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        except OSError as exc:
            caught.append(exc)

    gc.collect()
    gc.disable()
    try:
        run(loop, main())
        error = caught.pop() if caught else None
        holders = [type(holder).__name__ for holder in gc.get_referrers(error)
                   if holder is not sys._getframe()]
    finally:
        gc.enable()
    assert isinstance(error, ConnectionRefusedError)
    assert holders == [], f"the error is still held by {holders}"


# -- No blocking call in the loop's thread (conftest.no_blocking_calls) ------------------

def test_the_suite_catches_a_blocking_call_in_the_loops_thread(loop):
    """blockbuster is on for every row: time.sleep inside a coroutine raises."""
    import blockbuster

    async def main():
        time.sleep(0.001)

    with pytest.raises(blockbuster.BlockingError):
        run(loop, main())


def test_starting_a_child_makes_only_the_allowed_read(loop):
    """A child started from the loop: Popen's short read of its error pipe is the one
    blocking call allowed (conftest.ALLOWED_BLOCKING says why); nothing else blocks."""
    async def main():
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print('hello')", stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate()
        return out, process.returncode

    assert run(loop, main()) == (b"hello\n", 0)


# -- Arguments refused as asyncio refuses them -------------------------------------------

def test_create_server_with_no_address_and_no_socket_raises_value_error(loop):
    async def main():
        with pytest.raises(ValueError, match="Neither host/port nor sock were specified"):
            await loop.create_server(asyncio.Protocol)

    run(loop, main())


@pytest.mark.parametrize("fd", [object(), "3", None], ids=["object", "str", "None"])
def test_add_reader_refuses_what_is_not_a_file_as_selectors_do(loop, fd):
    """selectors' fileno() rules: an object without a usable fileno() is a ValueError
    (asyncio's "Invalid file object"), never an AttributeError."""
    for add in (loop.add_reader, loop.add_writer):
        with pytest.raises((TypeError, ValueError)):
            add(fd, print)
    for remove in (loop.remove_reader, loop.remove_writer):
        with pytest.raises((TypeError, ValueError)):
            remove(fd)


def test_datagram_endpoint_on_a_stream_socket_says_a_udp_socket_was_expected(loop_name, loop):
    """In the running Python's words: 3.13 says "A datagram socket was expected"
    (uvloop keeps the older words on every Python)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    words = "A datagram socket" if sys.version_info >= (3, 13) else "A UDP Socket"
    if loop_name == "uvloop":
        words = "A UDP Socket"

    async def main():
        with pytest.raises(ValueError, match=f"{words} was expected"):
            await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=sock)

    with sock:
        run(loop, main())


def test_messages_programs_match_on(loop_name, loop):
    """"Event loop is closed" and the thread check's words are asyncio's."""
    loop.set_debug(True)
    caught = []

    def from_another_thread():
        try:
            loop.call_soon(print)
        except RuntimeError as exc:
            caught.append(str(exc))

    async def main():
        await loop.run_in_executor(None, from_another_thread)

    run(loop, main())
    assert caught == ["Non-thread-safe operation invoked on an event loop other than the "
                      "current one"]
    loop.close()
    for call in (lambda: loop.call_soon(print), lambda: loop.call_later(1, print),
                 lambda: loop.run_forever()):
        with pytest.raises(RuntimeError, match="^Event loop is closed$"):
            call()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="^Event loop is closed$"):
        loop.create_task(coro)
    coro.close()


# -- UNIX sockets given to the loop ----------------------------------------------------

@pytest.fixture
def socket_folder():
    with tempfile.TemporaryDirectory() as folder:
        yield folder


@pytest.mark.skipif(not hasattr(socket, "SOCK_NONBLOCK"), reason="Linux's type flags")
def test_unix_server_on_a_socket_whose_type_carries_flags(loop, socket_folder):
    """A socket made with SOCK_NONBLOCK|SOCK_CLOEXEC in its type is a stream socket;
    closing the server leaves the file as the running Python's asyncio does
    (removed from 3.13, cleanup_socket; left before)."""
    path = os.path.join(socket_folder, "server")
    sock = socket.socket(socket.AF_UNIX,
                         socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    sock.bind(path)

    async def main():
        server = await loop.create_unix_server(asyncio.Protocol, sock=sock)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    run(loop, main())
    assert os.path.exists(path) is (sys.version_info < (3, 13))


def test_unix_server_at_a_path_leaves_its_file_as_the_running_asyncio(loop, socket_folder):
    path = os.path.join(socket_folder, "server")

    async def main():
        server = await loop.create_unix_server(asyncio.Protocol, path)
        server.close()
        await server.wait_closed()

    run(loop, main())
    assert os.path.exists(path) is (sys.version_info < (3, 13))


@pytest.mark.differs(loops=("uvloop",), reason="uvloop's create_datagram_endpoint takes no "
                                              "family=AF_UNIX with a path")
def test_datagram_endpoint_at_a_path_a_dead_endpoint_left(loop, socket_folder):
    path = os.path.join(socket_folder, "datagrams")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(path)
    dead.close()  # its file stays

    async def main():
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, path, family=socket.AF_UNIX)
        try:
            return transport.get_extra_info("sockname")
        finally:
            transport.close()

    assert run(loop, main()) == path


def test_datagram_endpoint_on_a_given_unix_datagram_socket(loop, socket_folder):
    path = os.path.join(socket_folder, "datagrams")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    received = []

    class Receiver(asyncio.DatagramProtocol):
        def datagram_received(self, data, address):
            received.append(data)
            done.set_result(None)

    async def main():
        transport, _ = await loop.create_datagram_endpoint(Receiver, sock=sock)
        try:
            sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            with sender:
                sender.setblocking(False)
                sender.sendto(b"hello", path)
            await done
        finally:
            transport.close()

    done = loop.create_future()
    run(loop, main())
    assert received == [b"hello"]


# -- TLS: the SSLContext is let go, and a peer's early EOF ends the connection cleanly -----

@pytest.fixture(scope="module")
def tls():
    """(server context factory, client context factory) for "localhost" (trustme)."""
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    certificate = authority.issue_cert("localhost")

    def server_context():
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        certificate.configure_cert(context)
        return context

    def client_context():
        context = ssl.create_default_context()
        authority.configure_trust(context)
        return context

    return server_context, client_context


class _Peer:
    """A TLS peer in a thread of its own, on a blocking socket, running ``serve(sock)``."""

    def __init__(self, serve) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.address = self.listener.getsockname()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(serve,))
        self.thread.start()

    def _run(self, serve) -> None:
        try:
            sock, _ = self.listener.accept()
            with sock:
                sock.settimeout(10)
                serve(sock)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.listener.close()

    def join(self) -> None:
        self.thread.join(15)
        assert not self.thread.is_alive(), "the TLS peer thread did not finish"
        if self.error is not None:
            raise self.error


class _Ending(asyncio.Protocol):
    def __init__(self) -> None:
        self.lost = asyncio.get_running_loop().create_future()
        self.received = b""

    def connection_made(self, transport):
        self.transport = transport  # kept, as most protocols do: a cycle if the loop keeps its side

    def data_received(self, data):
        self.received += data

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def test_the_sslcontext_is_let_go_after_a_tls_connection(loop, tls):
    """Once the connection is over and the program drops the transport, nothing holds the
    client's SSLContext: no cycle through the TLS protocol waits for the cyclic GC."""
    server_context, client_context = tls

    def serve(sock):
        with server_context().wrap_socket(sock, server_side=True) as tls_sock:
            tls_sock.recv(32)  # the client's close_notify: b""

    peer = _Peer(serve)
    context = client_context()

    async def main():
        transport, protocol = await loop.create_connection(
            _Ending, *peer.address, ssl=context, server_hostname="localhost")
        transport.close()
        await protocol.lost

    gc.collect()
    gc.disable()
    try:
        run(loop, main())
        peer.join()
        context = weakref.ref(context)
        assert context() is None, "the SSLContext is still referenced after the connection"
    finally:
        gc.enable()


def test_the_sslcontext_is_let_go_after_a_handshake_that_timed_out(loop):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts in the kernel, never answers the ClientHello
    context = ssl.create_default_context()

    async def main():
        with pytest.raises((ConnectionRefusedError, asyncio.TimeoutError)):
            await asyncio.wait_for(loop.create_connection(
                asyncio.Protocol, *listener.getsockname(), ssl=context,
                server_hostname="localhost"), 0.1)

    gc.collect()
    gc.disable()
    try:
        with listener:
            run(loop, main())
        context = weakref.ref(context)
        assert context() is None, "the SSLContext is still referenced after the time-out"
    finally:
        gc.enable()


def test_a_peer_that_shuts_down_after_its_last_bytes_gets_no_close_notify(loop_name, loop, tls):
    """The peer sends, shuts down its side of TCP (its TLS layer gone), and reads on until
    our EOF: it must read nothing, no stray TLS record, and our protocol hears
    connection_lost(None) with every byte delivered, after a paused read resumes."""
    server_context, client_context = tls
    peer_done = threading.Event()

    def serve(sock):
        tls_sock = server_context().wrap_socket(sock, server_side=True)
        tls_sock.sendall(b"hello")
        assert tls_sock.recv(1024) == b"world"
        tls_sock.sendall(b"extra bytes")
        tls_sock.shutdown(socket.SHUT_WR)  # drops the TLS layer: plain TCP from here
        peer_done.set()
        leftover = tls_sock.recv(1024)
        assert leftover == b"", f"the peer read {leftover!r} after its shutdown"

    class Pausing(_Ending):
        def data_received(self, data):
            super().data_received(data)
            if data == b"hello":
                self.transport.write(b"world")
                self.transport.pause_reading()

    peer = _Peer(serve)

    async def main():
        transport, protocol = await loop.create_connection(
            Pausing, *peer.address, ssl=client_context(), server_hostname="localhost")
        while not peer_done.is_set():
            await asyncio.sleep(0.01)
        transport.resume_reading()
        exc = await protocol.lost
        transport.close()
        return exc, protocol.received

    exc, received = run(loop, main())
    peer.join()  # the peer's own assertion: no stray record after its shutdown
    assert exc is None
    # uvloop, some of the time, drops the bytes that arrived while reading
    # was paused when the peer's EOF follows them (a race of its own).
    if loop_name != "uvloop":
        assert received == b"helloextra bytes"
