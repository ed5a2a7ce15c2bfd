# tests/test_aio_unix.py
#
# What only Unix has, on four loops: signal handlers, pipes, Unix sockets
# and subprocesses (tinyloop/aio/unix_events.py, base_subprocess.py).
#
# Rules this file keeps:
#   * Every test takes the ``loop`` fixture and so runs on stdlib asyncio
#     (the reference), on uvloop, on tinyloop.aio twice: with its pidfd
#     child watcher and with the thread-per-child one it falls back to, and
#     on tinyloop.uv (Part III's Unix code on the libuv core; skipped, with
#     the message that says what to install, where it is not built).  A
#     test that fails on asyncio is a wrong test; one that checks a
#     behaviour only ours has says so and skips the others, and one that
#     uvloop fails names uvloop's difference in its skip.
#   * The fixture is the leak check: the descriptors open in the process
#     (/proc/self/fd) are counted before the loop is made and after it is
#     closed, and no ResourceWarning may be raised in between.
#   * Every coroutine runs inside ``asyncio.wait_for(..., LIMIT)``: a loop
#     that hangs fails its test, not the suite.

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


import tinyloop.aio
from tinyloop import stages
from tinyloop.aio import unix_events

uvloop = pytest.importorskip("uvloop")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts descriptors in /proc/self/fd")

LIMIT = 10.0  # seconds a test's coroutine may take

# Loop name -> factory.  "asyncio" is the stdlib's Unix loop, the class
# asyncio.new_event_loop() returns under the default policy (named directly,
# so a policy another test installed cannot swap it).  "tinyloop-threads" is
# ours as on a kernel without pidfds: a thread waits for each child.
# "tinyloop-uv" is Part IV's loop, imported only when a test makes one.


def _tinyloop_uv() -> asyncio.AbstractEventLoop:
    import tinyloop.uv
    return tinyloop.uv.new_event_loop()


LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.SelectorEventLoop,
    "uvloop": uvloop.new_event_loop,
    "tinyloop": tinyloop.aio.new_event_loop,
    "tinyloop-threads": tinyloop.aio.new_event_loop,
    "tinyloop-uv": _tinyloop_uv,
}
NO_PIDFD = "from tinyloop.aio import unix_events; unix_events._can_use_pidfd = lambda: False"

PIPE = asyncio.subprocess.PIPE


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@functools.cache
def warm_up_uvloop() -> None:
    """Let libuv open what it opens once per process, before any count.

    The first time a loop watches a signal, libuv makes a pipe for the whole
    process (uv__signal_global_init) and keeps it: not a leak of the test's.
    """
    loop = uvloop.new_event_loop()
    loop.run_until_complete(_add_and_remove_a_signal_handler(loop))
    loop.close()


@functools.cache
def warm_up_tinyloop_uv() -> None:
    """The same for libuv under tinyloop.uv: its first uv_loop_init opens
    the pipe that serializes signal delivery, once per process, for good."""
    _tinyloop_uv().close()


async def _add_and_remove_a_signal_handler(loop: asyncio.AbstractEventLoop) -> None:
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    loop.remove_signal_handler(signal.SIGUSR1)


@pytest.fixture(params=list(LOOPS))
def loop_name(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "tinyloop-uv" and (why := stages.get("uv").unavailable()):
        pytest.skip(f"uv: {why}")
    if request.param == "tinyloop-threads":
        monkeypatch.setattr(unix_events, "_can_use_pidfd", lambda: False)
    return request.param


@pytest.fixture
def loop(loop_name: str) -> Iterator[asyncio.AbstractEventLoop]:
    """A new loop of the kind ``loop_name``; closed after the test, leaking nothing."""
    if loop_name == "uvloop":
        warm_up_uvloop()
    elif loop_name == "tinyloop-uv":
        warm_up_tinyloop_uv()
    gc.collect()
    before = open_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = LOOPS[loop_name]()
        try:
            yield loop
        finally:
            if not loop.is_closed():
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()
            del loop
            gc.collect()
    leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == []
    assert open_fds() - before == set()


def run(loop: asyncio.AbstractEventLoop, main: Awaitable[Any]) -> Any:
    return loop.run_until_complete(asyncio.wait_for(main, LIMIT))


class Recorder(asyncio.Protocol):
    """A protocol that writes down every call it gets, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.data = bytearray()
        self.transport: Any = None
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self.paused: asyncio.Future = asyncio.get_running_loop().create_future()
        self.resumed: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.events.append(("connection_made", None))

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> None:
        self.events.append(("eof_received", None))

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append(("connection_lost", exc))
        self.lost.set_result(exc)

    def pause_writing(self) -> None:
        self.events.append(("pause_writing", None))
        if not self.paused.done():
            self.paused.set_result(None)

    def resume_writing(self) -> None:
        self.events.append(("resume_writing", None))
        if not self.resumed.done():
            self.resumed.set_result(None)


# -- Signals -------------------------------------------------------------------------

def test_signal_handler_runs_with_its_arguments(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[Any, ...]:
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, lambda *args: got.set_result(args), "a", 2)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            return await got
        finally:
            # (Inside the running loop: uvloop's answers False while stopped.)
            assert loop.remove_signal_handler(signal.SIGUSR1) is True
            assert loop.remove_signal_handler(signal.SIGUSR1) is False

    assert run(loop, main()) == ("a", 2)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_signal_handler_runs_once_per_delivery_and_replaces(
        loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[str]:
        seen: list[str] = []
        loop.add_signal_handler(signal.SIGUSR2, seen.append, "first")
        loop.add_signal_handler(signal.SIGUSR2, seen.append, "second")  # replaces
        for delivered in range(1, 4):
            os.kill(os.getpid(), signal.SIGUSR2)
            while len(seen) < delivered:
                await asyncio.sleep(0.01)
        loop.remove_signal_handler(signal.SIGUSR2)
        return seen

    assert run(loop, main()) == ["second"] * 3


def test_removing_sigint_restores_keyboard_interrupt(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        assert loop.remove_signal_handler(signal.SIGINT)

    run(loop, main())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_close_removes_signal_handlers(loop: asyncio.AbstractEventLoop, loop_name: str) -> None:
    if loop_name == "uvloop":
        pytest.skip("uvloop 0.23's close() leaves the handler installed "
                    "(its remove_signal_handler answers False while the loop is stopped)")
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    loop.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1  # nobody's wakeup fd is left behind


def test_bad_signals_are_refused(loop: asyncio.AbstractEventLoop) -> None:
    async def handler() -> None:
        pass

    for bad in (0, signal.NSIG + 1):
        with pytest.raises(ValueError):
            loop.add_signal_handler(bad, lambda: None)
        with pytest.raises(ValueError):
            loop.remove_signal_handler(bad)
    for uncatchable in (signal.SIGKILL, signal.SIGSTOP):
        with pytest.raises(RuntimeError):
            loop.add_signal_handler(uncatchable, lambda: None)
    with pytest.raises(TypeError):
        loop.add_signal_handler(signal.SIGUSR1, handler)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_signal_handlers_need_the_main_thread(loop: asyncio.AbstractEventLoop,
                                              loop_name: str) -> None:
    errors: list[BaseException] = []

    def add() -> None:
        try:
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=add)
    thread.start()
    thread.join(LIMIT)
    # asyncio turns signal.set_wakeup_fd()'s ValueError into RuntimeError;
    # uvloop raises a ValueError of its own.
    expected = ValueError if loop_name == "uvloop" else RuntimeError
    assert len(errors) == 1 and isinstance(errors[0], expected), errors
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


RUNNERS = {
    "asyncio": "asyncio.run(main())",
    "uvloop": "import uvloop; uvloop.run(main())",
    "tinyloop": "import tinyloop.aio; tinyloop.aio.run(main())",
    "tinyloop-threads": f"{NO_PIDFD}; import tinyloop.aio; tinyloop.aio.run(main())",
    "tinyloop-uv": "import tinyloop.uv; tinyloop.uv.run(main())",
}


def test_ctrl_c_ends_run_with_keyboard_interrupt(loop_name: str) -> None:
    code = textwrap.dedent(f"""
        import asyncio, sys
        async def main():
            print("ready", flush=True)
            await asyncio.sleep(30)
        {RUNNERS[loop_name]}
    """)
    # ``with`` closes the pipes even when an assertion fails half-way, so a
    # failure here leaves no unclosed file for the next test's leak check.
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as child:
        try:
            assert child.stdout.readline() == b"ready\n"  # type: ignore[union-attr]
            time.sleep(0.3)  # Ctrl-C comes while the loop is idle, blocked in its wait
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=LIMIT)
        finally:
            child.kill()
            child.wait()
    # Python ends an uncaught KeyboardInterrupt by dying of SIGINT (3.8+).
    assert child.returncode in (1, 130, -signal.SIGINT), stderr
    text = stderr.decode()
    assert text.rstrip().endswith("KeyboardInterrupt"), text
    assert "Task was destroyed" not in text and "never retrieved" not in text, text


# -- Pipes ------------------------------------------------------------------------------

def test_read_pipe_reads_until_eof(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> Recorder:
        r, w = os.pipe()
        transport, protocol = await loop.connect_read_pipe(Recorder, os.fdopen(r, "rb", 0))
        assert os.get_blocking(r) is False
        os.write(w, b"hello ")
        os.write(w, b"pipe")
        os.close(w)
        assert await protocol.lost is None
        assert transport.is_closing()
        return protocol

    protocol = run(loop, main())
    assert bytes(protocol.data) == b"hello pipe"
    assert [name for name, _ in protocol.events] == ["connection_made", "eof_received",
                                                     "connection_lost"]


def test_read_pipe_pause_and_resume(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        r, w = os.pipe()
        transport, protocol = await loop.connect_read_pipe(Recorder, os.fdopen(r, "rb", 0))
        transport.pause_reading()
        assert not transport.is_reading()
        os.write(w, b"held")
        await asyncio.sleep(0.05)
        assert protocol.data == b""
        transport.resume_reading()
        while protocol.data != b"held":
            await asyncio.sleep(0.01)
        os.close(w)
        await protocol.lost

    run(loop, main())


@pytest.mark.parametrize("end", ["close", "write_eof"])
def test_write_pipe_writes_and_closes(loop: asyncio.AbstractEventLoop, loop_name: str,
                                      end: str) -> None:
    if loop_name == "uvloop" and end == "write_eof":
        pytest.skip("uvloop 0.23's write_eof on a pipe calls shutdown(2): ENOTSOCK")

    async def main() -> bytes:
        r, w = os.pipe()
        transport, protocol = await loop.connect_write_pipe(Recorder, os.fdopen(w, "wb", 0))
        assert transport.can_write_eof()
        transport.write(b"to the ")
        transport.writelines([b"reader", b"\n"])
        getattr(transport, end)()
        assert await protocol.lost is None
        with os.fdopen(r, "rb") as reader:
            return reader.read()

    assert run(loop, main()) == b"to the reader\n"


def test_write_pipe_pauses_the_protocol_when_the_reader_does_not_read(
        loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[str]:
        r, w = os.pipe()
        transport, protocol = await loop.connect_write_pipe(Recorder, os.fdopen(w, "wb", 0))
        chunk = b"x" * 65536
        while not protocol.paused.done():  # a pipe holds 64 KiB; then we buffer
            transport.write(chunk)
        assert transport.get_write_buffer_size() > 0
        reader = os.fdopen(r, "rb")
        drained = loop.run_in_executor(None, reader.read)
        await protocol.resumed
        transport.close()
        await protocol.lost
        data = await drained
        reader.close()
        assert set(data) == {ord("x")} and len(data) % len(chunk) == 0
        return [name for name, _ in protocol.events]

    events = run(loop, main())
    assert events[:3] == ["connection_made", "pause_writing", "resume_writing"]
    assert events[-1] == "connection_lost"


@pytest.mark.parametrize("buffered", [False, True], ids=["idle", "buffered"])
def test_write_pipe_sees_the_reader_close(loop: asyncio.AbstractEventLoop, buffered: bool) -> None:
    async def main() -> BaseException | None:
        r, w = os.pipe()
        transport, protocol = await loop.connect_write_pipe(Recorder, os.fdopen(w, "wb", 0))
        if buffered:
            transport.write(b"x" * (1024 * 1024))
            assert transport.get_write_buffer_size() > 0
        os.close(r)
        return await protocol.lost

    exc = run(loop, main())
    if buffered:
        assert isinstance(exc, BrokenPipeError)
    else:
        assert exc is None


def test_write_pipe_over_a_socket_pair(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> bytes:
        ours, theirs = socket.socketpair()
        transport, protocol = await loop.connect_write_pipe(Recorder, ours)
        transport.write(b"over a socket")
        await asyncio.sleep(0.05)
        data = theirs.recv(100)
        theirs.close()
        assert await protocol.lost is None
        return data

    assert run(loop, main()) == b"over a socket"


def test_pipes_refuse_regular_files(loop: asyncio.AbstractEventLoop, loop_name: str,
                                    tmp_path: Path) -> None:
    if loop_name == "uvloop":
        pytest.skip("uvloop 0.23 aborts the process in a libuv assertion instead")
    async def main() -> None:
        path = tmp_path / "regular"
        path.write_bytes(b"")
        with open(path, "rb") as file, pytest.raises(ValueError):
            await loop.connect_read_pipe(asyncio.Protocol, file)
        with open(path, "wb") as file, pytest.raises(ValueError):
            await loop.connect_write_pipe(asyncio.Protocol, file)

    run(loop, main())


def test_unclosed_pipe_transport_warns(loop: asyncio.AbstractEventLoop, loop_name: str) -> None:
    if loop_name == "uvloop":
        pytest.skip("uvloop 0.23's pipe transports do not warn")
    async def main() -> None:
        r, w = os.pipe()
        transport, protocol = await loop.connect_read_pipe(asyncio.Protocol, os.fdopen(r, "rb", 0))
        transport.pause_reading()  # never see the EOF: the transport stays open
        # The write end is closed only now: a loop that runs I/O callbacks
        # before the callbacks queued in the turn before (libuv's order:
        # tinyloop.uv, uvloop) would otherwise read the EOF, and close the
        # transport, before this task got to pause it.
        os.close(w)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(loop, main())
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)


# -- Unix sockets ---------------------------------------------------------------------------

async def echo_once(path: Any) -> bytes:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_unix_server(echo, path)
    try:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"over a unix socket\n")
        line = await reader.readline()
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()
        return line
    finally:
        server.close()
        await server.wait_closed()


def test_unix_echo_at_a_path(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    assert run(loop, echo_once(tmp_path / "echo.sock")) == b"over a unix socket\n"


def test_unix_echo_in_the_abstract_namespace(loop: asyncio.AbstractEventLoop,
                                             loop_name: str) -> None:
    if loop_name == "uvloop":
        pytest.skip("uvloop 0.23 refuses a str name starting with NUL (EINVAL)")
    name = f"\0tinyloop-test-{os.getpid()}-{loop_name}"
    assert run(loop, echo_once(name)) == b"over a unix socket\n"


def test_unix_server_replaces_a_stale_socket_file(loop: asyncio.AbstractEventLoop,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()  # the file stays: a server that died
    assert path.exists()
    assert run(loop, echo_once(path)) == b"over a unix socket\n"


def test_unix_server_leaves_other_files_alone(loop: asyncio.AbstractEventLoop,
                                              tmp_path: Path) -> None:
    path = tmp_path / "not-a-socket"
    path.write_text("keep me")

    async def main() -> None:
        with pytest.raises(OSError):
            await loop.create_unix_server(asyncio.Protocol, path)

    run(loop, main())
    assert path.read_text() == "keep me"


def test_unix_server_cleans_up_its_socket_file(loop: asyncio.AbstractEventLoop, loop_name: str,
                                               tmp_path: Path) -> None:
    """By default as the running Python's asyncio (3.13 removes the file, 3.11 and 3.12
    leave it); tinyloop takes 3.13's ``cleanup_socket`` on every Python."""
    if not loop_name.startswith("tinyloop") and (
            loop_name != "asyncio" or sys.version_info < (3, 13)):
        pytest.skip("cleanup_socket is Python 3.13's")
    path = tmp_path / "clean.sock"

    async def main() -> None:
        server = await loop.create_unix_server(asyncio.Protocol, path)
        assert path.exists()
        server.close()
        await server.wait_closed()
        assert path.exists() is (sys.version_info < (3, 13))
        server = await loop.create_unix_server(asyncio.Protocol, path, cleanup_socket=True)
        server.close()
        await server.wait_closed()
        assert not path.exists()
        server = await loop.create_unix_server(asyncio.Protocol, path, cleanup_socket=False)
        server.close()
        await server.wait_closed()
        assert path.exists()

    run(loop, main())


def test_unix_connection_argument_checks(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(ValueError):
            await loop.create_unix_connection(asyncio.Protocol)
        with pytest.raises(ValueError):
            await loop.create_unix_connection(asyncio.Protocol, str(tmp_path / "x"),
                                              server_hostname="example.org")
        with pytest.raises(FileNotFoundError):
            await loop.create_unix_connection(asyncio.Protocol, str(tmp_path / "nobody"))
        with pytest.raises(ValueError):
            await loop.create_unix_server(asyncio.Protocol)

    run(loop, main())


def test_unix_tls_echo(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("tinyloop.test").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    path = tmp_path / "tls.sock"

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def main() -> tuple[bytes, str]:
        server = await asyncio.start_unix_server(echo, path, ssl=server_context)
        try:
            reader, writer = await asyncio.open_unix_connection(
                path, ssl=client_context, server_hostname="tinyloop.test")
            writer.write(b"secret\n")
            line = await reader.readline()
            version = writer.get_extra_info("ssl_object").version()
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            return line, version
        finally:
            server.close()
            await server.wait_closed()

    line, version = run(loop, main())
    assert line == b"secret\n" and version.startswith("TLS")


# -- Subprocesses -------------------------------------------------------------------------------

def test_subprocess_cat_round_trip(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[bytes, int]:
        proc = await asyncio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE, stderr=PIPE)
        payload = b"line\n" * 50000  # more than a pipe holds: flow control on stdin
        out, err = await proc.communicate(payload)
        assert err == b""
        return out == payload, proc.returncode

    assert run(loop, main()) == (True, 0)


def test_subprocess_stderr_and_exit_code(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[bytes, bytes, int]:
        proc = await asyncio.create_subprocess_exec("sh", "-c", "echo err >&2; exit 3",
                                                    stdout=PIPE, stderr=PIPE)
        out, err = await proc.communicate()
        assert await proc.wait() == 3
        return out, err, proc.returncode

    assert run(loop, main()) == (b"", b"err\n", 3)


def test_subprocess_that_does_not_read_its_input(loop: asyncio.AbstractEventLoop,
                                                 loop_name: str) -> None:
    if loop_name == "uvloop":
        pytest.skip("uvloop 0.23 sometimes raises RuntimeError from the closed stdin transport")

    async def main() -> tuple[Any, int]:
        proc = await asyncio.create_subprocess_exec("true", stdin=PIPE, stdout=PIPE)
        result = await proc.communicate(b"x" * (2 * 1024 * 1024))  # EPIPE, swallowed
        with contextlib.suppress(ProcessLookupError):  # exited: the signal goes nowhere
            proc.send_signal(signal.SIGTERM)
        return result, proc.returncode

    assert run(loop, main()) == ((b"", None), 0)


def test_subprocess_stderr_into_stdout(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[bytes, Any]:
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", "echo out; echo err >&2", stdout=PIPE, stderr=asyncio.subprocess.STDOUT)
        out, err = await proc.communicate()
        assert proc.stdin is None and proc.stderr is None
        return out, err

    assert run(loop, main()) == (b"out\nerr\n", None)


def test_subprocess_streams_line_by_line(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[bytes]:
        proc = await asyncio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE)
        lines = []
        for word in (b"one\n", b"two\n"):
            proc.stdin.write(word)  # type: ignore[union-attr]
            await proc.stdin.drain()  # type: ignore[union-attr]
            lines.append(await proc.stdout.readline())  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
        assert await proc.stdout.read() == b""  # type: ignore[union-attr]
        assert await proc.wait() == 0
        return lines

    assert run(loop, main()) == [b"one\n", b"two\n"]


@pytest.mark.parametrize("how, sig", [("terminate", signal.SIGTERM), ("kill", signal.SIGKILL),
                                      ("send_signal", signal.SIGUSR1)])
def test_subprocess_killed_by_a_signal(loop: asyncio.AbstractEventLoop, how: str, sig: int) -> None:
    async def main() -> int:
        proc = await asyncio.create_subprocess_exec("sleep", "30")
        if how == "send_signal":
            proc.send_signal(sig)
        else:
            getattr(proc, how)()
        return await proc.wait()

    assert run(loop, main()) == -sig


def test_subprocess_pipeline(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> bytes:
        r, w = os.pipe()
        printf = await asyncio.create_subprocess_exec("printf", "pear\\napple\\nfig\\n", stdout=w)
        os.close(w)  # the child has its copy; sort sees EOF when printf ends
        sort = await asyncio.create_subprocess_exec("sort", stdin=r, stdout=PIPE)
        os.close(r)
        out, _ = await sort.communicate()
        assert await printf.wait() == 0 and sort.returncode == 0
        return out

    assert run(loop, main()) == b"apple\nfig\npear\n"


def test_subprocess_shell(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[bytes, int]:
        proc = await asyncio.create_subprocess_shell("echo $((6 * 7)); exit 5", stdout=PIPE)
        out, _ = await proc.communicate()
        return out, proc.returncode

    assert run(loop, main()) == (b"42\n", 5)


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_subprocess_creation_cancelled(loop: asyncio.AbstractEventLoop, loop_name: str,
                                       steps: int) -> None:
    """Cancelled part-way through its start, a subprocess is killed and nothing leaks."""
    if loop_name == "uvloop" and steps:
        pytest.skip("uvloop 0.23 leaves the process transport unclosed (ResourceWarning)")

    async def main() -> None:
        task = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "sleep", "30", stdin=PIPE, stdout=PIPE, stderr=PIPE))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        try:
            proc = await task
        except asyncio.CancelledError:
            return
        proc.kill()  # it was done before the cancel came
        await proc.wait()

    run(loop, main())


def test_subprocess_missing_program(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        with pytest.raises(FileNotFoundError):
            await asyncio.create_subprocess_exec("/nonexistent/program", stdout=PIPE)

    run(loop, main())


def test_subprocess_argument_checks(loop: asyncio.AbstractEventLoop, loop_name: str) -> None:
    # asyncio checks the command's type itself; uvloop leaves it to os.fspath.
    not_a_string = TypeError if loop_name == "uvloop" else ValueError

    async def main() -> None:
        for kwargs in ({"universal_newlines": True}, {"shell": True}, {"bufsize": 1},
                       {"text": True}, {"encoding": "utf-8"}, {"errors": "strict"}):
            with pytest.raises(ValueError):
                await loop.subprocess_exec(asyncio.SubprocessProtocol, "true", **kwargs)
        with pytest.raises(not_a_string):
            await loop.subprocess_shell(asyncio.SubprocessProtocol, ["true"])
        with pytest.raises(ValueError):
            await loop.subprocess_shell(asyncio.SubprocessProtocol, "true", shell=False)

    run(loop, main())


class ProcessRecorder(asyncio.SubprocessProtocol):
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.events.append("connection_made")

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.events.append(("data", fd, data))

    def pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        self.events.append(("pipe_lost", fd))

    def process_exited(self) -> None:
        self.events.append("process_exited")

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append("connection_lost")
        self.done.set_result(None)


def test_subprocess_protocol_call_order(loop: asyncio.AbstractEventLoop, loop_name: str) -> None:
    async def main() -> tuple[list[Any], Any]:
        transport, protocol = await loop.subprocess_exec(ProcessRecorder, "sh", "-c", "echo hi")
        assert transport.get_pid() > 0
        assert transport.get_pipe_transport(0) is not None
        await protocol.done
        returncode = transport.get_returncode()
        transport.close()
        return protocol.events, returncode

    events, returncode = run(loop, main())
    assert returncode == 0
    assert ("data", 1, b"hi\n") in events
    calls = [e for e in events if not isinstance(e, tuple) or e[0] != "data"]
    assert set(calls) == {"connection_made", "process_exited", ("pipe_lost", 0),
                          ("pipe_lost", 1), ("pipe_lost", 2), "connection_lost"}
    if loop_name != "uvloop":  # uvloop 0.23 now and then reports a pipe lost after the end
        assert calls[0] == "connection_made" and calls[-1] == "connection_lost"


def test_unclosed_subprocess_transport_warns(loop: asyncio.AbstractEventLoop,
                                            loop_name: str) -> None:
    if loop_name == "uvloop":
        pytest.skip("uvloop 0.23's subprocess transports do not warn")
    async def main() -> None:
        transport, protocol = await loop.subprocess_exec(
            ProcessRecorder, "true", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        await protocol.done

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(loop, main())
        # 3.11's ThreadedChildWatcher (the asyncio row) hands the exit over with
        # call_soon_threadsafe while its thread still holds the transport: wait
        # for that thread to end, or gc.collect() comes too early to warn.
        for thread in threading.enumerate():
            if thread.name.startswith("asyncio-waitpid-"):
                thread.join(LIMIT)
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)


def test_closing_the_loop_under_a_running_child(loop: asyncio.AbstractEventLoop,
                                                loop_name: str) -> None:
    """The transport, collected after its loop closed, still kills its child (tinyloop only).

    asyncio's and uvloop's child watchers keep the transport alive until the
    child exits, so for them the child would run on.
    """
    if not loop_name.startswith("tinyloop"):
        pytest.skip("their watchers hold the transport until the child exits")
    transport, _ = run(loop, loop.subprocess_exec(
        asyncio.SubprocessProtocol, "sleep", "30", stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    pid = transport.get_pid()
    loop.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del transport
        gc.collect()
        messages = [str(w.message) for w in caught]
        caught.clear()  # a warning holds its source, the transport: let it go
        gc.collect()  # Popen's own "still running" comes now, unrecorded
    assert any("unclosed transport" in message for message in messages)
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        try:
            reaped, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # Popen's __del__ found it dead and reaped it first
        if reaped:
            assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
            return
        time.sleep(0.01)
    pytest.fail(f"child {pid} still runs")


def run_in_a_thread(loop_name: str, main: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``main()`` on a new loop in a new thread (not the main one); return its result."""
    results: list[Any] = []

    def target() -> None:
        thread_loop = LOOPS[loop_name]()
        try:
            results.append(thread_loop.run_until_complete(asyncio.wait_for(main(), LIMIT)))
        except BaseException as exc:
            results.append(exc)
        finally:
            thread_loop.run_until_complete(thread_loop.shutdown_default_executor())
            thread_loop.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(LIMIT + 5)
    assert not thread.is_alive()
    if isinstance(results[0], BaseException):
        raise results[0]
    return results[0]


async def two_children() -> list[Any]:
    proc = await asyncio.create_subprocess_exec("sh", "-c", "echo from a thread; exit 4",
                                                stdout=PIPE)
    out, _ = await proc.communicate()
    sleeper = await asyncio.create_subprocess_exec("sleep", "30")
    sleeper.kill()
    return [out, proc.returncode, await sleeper.wait()]


def test_subprocesses_from_a_loop_in_another_thread(loop: asyncio.AbstractEventLoop,
                                                     loop_name: str) -> None:
    # ``loop`` is unused but for its leak check around the thread's loop.
    assert run_in_a_thread(loop_name, two_children) == [b"from a thread\n", 4, -signal.SIGKILL]


def test_tinyloop_watches_children_as_its_kernel_allows(loop: asyncio.AbstractEventLoop,
                                                      loop_name: str) -> None:
    """aio watches with a pidfd or a thread; uv lets libuv watch (uv_spawn's exit callback)."""
    if not loop_name.startswith("tinyloop"):
        pytest.skip("tinyloop's own child watchers")
    threads = loop_name == "tinyloop-threads" or not unix_events._can_use_pidfd()

    async def main() -> str:
        transport, protocol = await loop.subprocess_exec(ProcessRecorder, "true")
        kind = type(getattr(transport, "_watcher", transport._uvproc if loop_name == "tinyloop-uv"
                            else None)).__name__
        await protocol.done
        transport.close()
        return kind

    expected = ("UVProcess" if loop_name == "tinyloop-uv"
                else "_ThreadWatcher" if threads else "_PidfdWatcher")
    assert run(loop, main()) == expected


def test_subprocesses_install_no_sigchld_handler(loop: asyncio.AbstractEventLoop) -> None:
    before = signal.getsignal(signal.SIGCHLD)
    assert run(loop, two_children())[1] == 4
    assert signal.getsignal(signal.SIGCHLD) == before


def test_many_subprocesses_at_once(loop: asyncio.AbstractEventLoop) -> None:
    async def one(i: int) -> bytes:
        proc = await asyncio.create_subprocess_exec("sh", "-c", f"echo {i}", stdout=PIPE)
        out, _ = await proc.communicate()
        return out

    async def main() -> list[bytes]:
        return await asyncio.gather(*(one(i) for i in range(20)))

    assert run(loop, main()) == [f"{i}\n".encode() for i in range(20)]
