# tests/test_aio_programs.py
#
# Real programs, unchanged, on tinyloop.aio and tinyloop.uv: an aiohttp server and client
# (keep-alive, uploads, a websocket, static files by sendfile, streaming,
# a pool and a timeout), uvicorn serving a Starlette app to httpx, asyncio
# streams over TCP and a Unix socket, UDP, subprocesses and a pipeline,
# signal handlers and Ctrl-C, and a TLS echo.
#
# Rules this file keeps:
#   * Every test runs on the conformance suite's rows (the ``loop_name``
#     parameter, from tests/conformance/conftest.py): stdlib asyncio, the
#     reference; uvloop, the other drop-in loop; and each tinyloop stage
#     whose loop is an asyncio loop (``aio``, ``uv``; a row whose loop is not
#     built here skips, saying what to install).  A test that fails on
#     asyncio is a wrong test.
#   * A test is one coroutine run by ``asyncio.Runner(loop_factory=...)``,
#     the way a program picks its loop, inside an ``asyncio.timeout`` of
#     LIMIT seconds: a loop that hangs fails the test instead of the suite.
#   * Traffic goes to 127.0.0.1 only; every server is bound to port 0 and
#     closed by the test that opened it.
#   * Behaviour, never speed: the checks are on bytes, counts and order.
#
# Where a tinyloop loop lacks a part (a stage still being written), its
# tests skip on that row with a reason that names the missing method, and
# still run on the others.

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
# The conformance suite's rows: asyncio, uvloop, and every stage of
# tinyloop/stages.py whose loop is an asyncio loop (aio, uv).
from conformance.conftest import LOOP_NAMES, loop_factory, loop_spec

LIMIT = 30.0  # seconds one program may take before its test fails
HOST = "127.0.0.1"


@pytest.fixture(params=LOOP_NAMES)
def loop_name(request: pytest.FixtureRequest) -> str:
    loop_factory(request.param)  # skips the uvloop row where uvloop is absent
    return request.param


def run(loop_name: str, main: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``main()`` on a new loop of the kind ``loop_name``, within LIMIT seconds."""
    async def bounded() -> Any:
        async with asyncio.timeout(LIMIT):
            return await main()

    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
        return runner.run(bounded())


def loop_class(loop_name: str) -> type[asyncio.AbstractEventLoop]:
    loop = loop_factory(loop_name)()
    loop.close()
    return type(loop)


def require(loop_name: str, method: str) -> None:
    """Skip the test on a tinyloop row whose loop lacks ``method`` (a stage not finished).

    A method still inherited from asyncio.AbstractEventLoop is one that only
    raises NotImplementedError.
    """
    if loop_name in ("asyncio", "uvloop"):
        return
    if getattr(loop_class(loop_name), method) is getattr(asyncio.AbstractEventLoop, method):
        pytest.skip(f"the {loop_name} loop has no {method}() yet")


# -- aiohttp ----------------------------------------------------------------------

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

MIB = 1024 * 1024


def aiohttp_app(static: Path | None = None) -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        # The client's port says which connection carried the request.
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return web.json_response({"hello": "world", "peer_port": peer and peer[1]})

    async def echo(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        return web.Response(body=body, headers={"X-SHA256": hashlib.sha256(body).hexdigest()})

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str("echo: " + msg.data)
            elif msg.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(msg.data[::-1])
        return ws

    async def stream(request: web.Request) -> web.StreamResponse:
        # A chunked response written piece by piece, each write drained.
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(int(request.query["n"])):
            await response.write(b"%d\n" % i)
        await response.write_eof()
        return response

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query["delay"]))
        return web.Response(text="late")

    app = web.Application(client_max_size=4 * MIB)
    app.router.add_get("/", hello)
    app.router.add_post("/echo", echo)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/stream", stream)
    app.router.add_get("/slow", slow)
    if static is not None:
        app.router.add_static("/static", static)
    return app


@contextlib.asynccontextmanager
async def aiohttp_server(static: Path | None = None) -> Any:
    runner = web.AppRunner(aiohttp_app(static), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://{HOST}:{port}"
    finally:
        await runner.cleanup()


def test_aiohttp_keep_alive(loop_name: str) -> None:
    """Several requests, one after another, all on one kept-alive connection."""
    async def main() -> list[dict[str, Any]]:
        async with aiohttp_server() as url:
            connector = aiohttp.TCPConnector(limit=1)
            async with aiohttp.ClientSession(connector=connector) as session:
                answers = []
                for _ in range(5):
                    async with session.get(url + "/") as response:
                        assert response.status == 200
                        answers.append(await response.json())
                return answers

    answers = run(loop_name, main)
    assert all(answer["hello"] == "world" for answer in answers)
    assert len({answer["peer_port"] for answer in answers}) == 1, answers


def test_aiohttp_upload_1mib(loop_name: str) -> None:
    """A 1 MiB body goes up and comes back whole (flow control both ways)."""
    body = os.urandom(MIB)

    async def main() -> tuple[bytes, str]:
        async with aiohttp_server() as url:
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/echo", data=body) as response:
                    assert response.status == 200
                    return await response.read(), response.headers["X-SHA256"]

    echoed, digest = run(loop_name, main)
    assert digest == hashlib.sha256(body).hexdigest()
    assert echoed == body


def test_aiohttp_websocket_echo(loop_name: str) -> None:
    async def main() -> list[Any]:
        async with aiohttp_server() as url:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(url + "/ws") as ws:
                    got = []
                    for i in range(3):
                        await ws.send_str(f"message {i}")
                        got.append(await ws.receive_str())
                    await ws.send_bytes(b"\x00\x01\x02" * 1000)
                    got.append(await ws.receive_bytes())
                    await ws.close()
                    return got

    got = run(loop_name, main)
    assert got[:3] == ["echo: message 0", "echo: message 1", "echo: message 2"]
    assert got[3] == (b"\x00\x01\x02" * 1000)[::-1]


def test_aiohttp_static_file_by_sendfile(loop_name: str, tmp_path: Path) -> None:
    """aiohttp serves files with loop.sendfile(): a whole 3 MiB file, and a byte range of it."""
    content = os.urandom(3 * MIB)
    (tmp_path / "blob.bin").write_bytes(content)

    async def main() -> tuple[bytes, int, bytes]:
        async with aiohttp_server(static=tmp_path) as url:
            async with aiohttp.ClientSession() as session:
                async with session.get(url + "/static/blob.bin") as response:
                    assert response.status == 200
                    whole = await response.read()
                async with session.get(url + "/static/blob.bin",
                                       headers={"Range": "bytes=1000-1999999"}) as response:
                    return whole, response.status, await response.read()

    whole, status, part = run(loop_name, main)
    assert whole == content
    assert (status, part) == (206, content[1000:2000000])


def test_aiohttp_streaming_both_ways(loop_name: str) -> None:
    """A chunked download read line by line, and an upload from an async generator."""
    async def pieces() -> Any:
        for i in range(64):
            yield bytes([i]) * 16384
            await asyncio.sleep(0)

    async def main() -> tuple[list[bytes], bytes]:
        async with aiohttp_server() as url:
            async with aiohttp.ClientSession() as session:
                async with session.get(url + "/stream", params={"n": "5000"}) as response:
                    assert response.headers["Transfer-Encoding"] == "chunked"
                    lines = [line async for line in response.content]
                async with session.post(url + "/echo", data=pieces()) as response:
                    return lines, await response.read()

    lines, echoed = run(loop_name, main)
    assert lines == [b"%d\n" % i for i in range(5000)]
    assert echoed == b"".join(bytes([i]) * 16384 for i in range(64))


def test_aiohttp_many_clients_and_a_timeout(loop_name: str) -> None:
    """100 requests through a pool of 10 connections; a request that times out harms no other."""
    async def main() -> tuple[list[int], type[BaseException], str]:
        async with aiohttp_server() as url:
            connector = aiohttp.TCPConnector(limit=10)
            async with aiohttp.ClientSession(connector=connector) as session:
                async def get(path: str) -> int:
                    async with session.get(url + path) as response:
                        await response.read()
                        return response.status

                statuses = await asyncio.gather(*(get("/") for _ in range(100)))
                try:
                    async with session.get(url + "/slow", params={"delay": "1"},
                                           timeout=aiohttp.ClientTimeout(total=0.2)):
                        raise AssertionError("the slow request should have timed out")
                except asyncio.TimeoutError as exc:
                    timed_out: type[BaseException] = type(exc)
                async with session.get(url + "/slow", params={"delay": "0.01"}) as response:
                    return statuses, timed_out, await response.text()

    statuses, timed_out, late = run(loop_name, main)
    assert statuses == [200] * 100
    assert issubclass(timed_out, asyncio.TimeoutError)
    assert late == "late"


def test_aiohttp_client_reset_mid_upload_harms_no_other(loop_name: str) -> None:
    """A client that resets its connection halfway through a body: the handler sees an
    error, and the server goes on serving (a keep-alive client on it included)."""
    import struct

    async def main() -> tuple[int, str]:
        async with aiohttp_server() as url:
            port = int(url.rsplit(":", 1)[1])
            async with aiohttp.ClientSession() as session:
                async with session.get(url + "/") as response:  # a connection kept alive
                    assert response.status == 200
                for _ in range(3):
                    reader, writer = await asyncio.open_connection(HOST, port)
                    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % MIB)
                    writer.write(b"y" * 100_000)
                    await writer.drain()
                    await asyncio.sleep(0.05)
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()  # close(2) with SO_LINGER 0: an RST
                await asyncio.sleep(0.1)
                async with session.get(url + "/") as response:
                    return response.status, (await response.json())["hello"]

    assert run(loop_name, main) == (200, "world")


# -- uvicorn + Starlette, hit by httpx ----------------------------------------------
#
# Discussion: uvicorn chooses a loop only in Server.run() (through
# Config.get_loop_factory(), from ``loop=``); Server.serve() is a coroutine
# that runs on whatever loop is running it.  So the test runs serve() as a
# task on the loop under test, with loop="none" to say uvicorn chooses
# nothing, hands it a socket bound to port 0, and waits for
# ``server.started``.  serve() also swaps the SIGINT/SIGTERM handlers with
# signal.signal() while it runs, and puts them back after.

uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402


def starlette_app() -> Starlette:
    async def home(request: Request) -> JSONResponse:
        return JSONResponse({"loop": type(asyncio.get_running_loop()).__module__})

    async def echo(request: Request) -> PlainTextResponse:
        return PlainTextResponse((await request.body()).decode().upper())

    async def count(request: Request) -> StreamingResponse:
        async def lines() -> Any:
            for i in range(int(request.query_params["n"])):
                yield f"{i}\n"
                await asyncio.sleep(0)
        return StreamingResponse(lines(), media_type="text/plain")

    def blocking(request: Request) -> PlainTextResponse:
        # A plain function: Starlette runs it in a worker thread (anyio's),
        # whose result comes back to the loop through call_soon_threadsafe.
        import threading
        time.sleep(0.01)
        return PlainTextResponse(threading.current_thread().name)

    return Starlette(routes=[Route("/", home), Route("/echo", echo, methods=["POST"]),
                             Route("/count", count), Route("/blocking", blocking)])


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_uvicorn_starlette_httpx(loop_name: str, http: str) -> None:
    if importlib.util.find_spec(http) is None:
        pytest.skip(f"{http} is not installed")

    async def main() -> tuple[Any, ...]:
        sock = socket.socket()
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(starlette_app(), loop="none", http=http, ws="none",
                                lifespan="on", log_level="warning")
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                assert not serving.done(), serving
                await asyncio.sleep(0.01)
            async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}") as client:
                home = (await client.get("/")).json()
                echo = await client.post("/echo", content=b"shout")
                big = await client.post("/echo", content=b"x" * MIB)
                assert big.content == b"X" * MIB
                counted = await client.get("/count", params={"n": 100})
                many = await asyncio.gather(*(client.get("/") for _ in range(10)))
                threads = await asyncio.gather(*(client.get("/blocking") for _ in range(8)))
                assert all(r.status_code == 200 and r.text != "MainThread" for r in threads)
            return home, echo.text, counted.text, [r.status_code for r in many]
        finally:
            server.should_exit = True
            await serving
            sock.close()

    home, echo, counted, statuses = run(loop_name, main)
    assert home["loop"] == loop_class(loop_name).__module__  # the app ran on the loop under test
    assert echo == "SHOUT"
    assert counted == "".join(f"{i}\n" for i in range(100))
    assert statuses == [200] * 10


# -- asyncio streams ------------------------------------------------------------------

def test_streams_lines_and_exact_reads(loop_name: str) -> None:
    """A line protocol with start_server/open_connection, readline and readexactly."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            command, _, arg = line.decode().strip().partition(" ")
            if command == "BLOB":
                blob = await reader.readexactly(int(arg))
                writer.write(b"%d %s\n" % (len(blob), hashlib.sha256(blob).hexdigest().encode()))
            else:
                writer.write(line.upper())
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main() -> list[bytes]:
        server = await asyncio.start_server(handle, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(HOST, port)
            got = []
            writer.write(b"hello\nworld\n")
            got.append(await reader.readline())
            got.append(await reader.readline())
            blob = bytes(range(256)) * 4096
            writer.write(b"BLOB %d\n" % len(blob))
            writer.write(blob)
            await writer.drain()
            got.append(await reader.readline())
            writer.write_eof()
            got.append(await reader.read())  # the server closes after our EOF
            writer.close()
            await writer.wait_closed()
            return got

    got = run(loop_name, main)
    blob = bytes(range(256)) * 4096
    assert got == [b"HELLO\n", b"WORLD\n",
                   b"%d %s\n" % (len(blob), hashlib.sha256(blob).hexdigest().encode()), b""]


def test_streams_drain_waits_for_a_slow_reader(loop_name: str) -> None:
    """drain() blocks while the peer reads slowly, and every byte arrives in order.

    The server writes 8 MiB as fast as drain() lets it; the client reads
    64 KiB at a time with pauses, so the server's write buffer must fill
    past the high-water mark and drain() must wait.
    """
    total, piece = 8 * MIB, 64 * 1024
    seen: dict[str, Any] = {"max_buffered": 0, "waits": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.set_write_buffer_limits(high=256 * 1024)
        for i in range(total // piece):
            writer.write(bytes([i % 256]) * piece)
            buffered = writer.transport.get_write_buffer_size()
            seen["max_buffered"] = max(seen["max_buffered"], buffered)
            if buffered > 256 * 1024:
                seen["waits"] += 1
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main() -> int:
        server = await asyncio.start_server(handle, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(HOST, port, limit=piece)
            received = 0
            while chunk := await reader.read(piece):
                # Every byte of the i-th piece is i % 256: order and content checked.
                for offset in range(0, len(chunk), 4096):
                    assert chunk[offset] == ((received + offset) // piece) % 256
                received += len(chunk)
                if received % (MIB) < piece:
                    await asyncio.sleep(0.02)  # a slow reader
            writer.close()
            await writer.wait_closed()
            return received

    assert run(loop_name, main) == total
    assert seen["waits"] > 0, seen  # the buffer went past the mark, so drain() had to wait
    assert seen["max_buffered"] <= 256 * 1024 + piece, seen  # and it never grew past mark + one write


def test_streams_over_a_unix_socket(loop_name: str, tmp_path: Path) -> None:
    """start_unix_server/open_unix_connection: the same line protocol on an AF_UNIX path."""
    require(loop_name, "create_unix_server")
    path = str(tmp_path / "echo.sock")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line[::-1].strip() + b"\n")
            await writer.drain()
        writer.close()

    async def main() -> list[bytes]:
        server = await asyncio.start_unix_server(handle, path)
        async with server:
            reader, writer = await asyncio.open_unix_connection(path)
            got = []
            for word in (b"stressed", b"drawer", b"x" * 50000):
                writer.write(word + b"\n")
                got.append(await reader.readline())
            writer.close()
            await writer.wait_closed()
        return got

    assert run(loop_name, main) == [b"desserts\n", b"reward\n", b"x" * 50000 + b"\n"]


def test_udp_echo(loop_name: str) -> None:
    """create_datagram_endpoint: a server that answers each datagram, a client that sends 50."""
    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            self.transport.sendto(data.upper(), addr)  # type: ignore[attr-defined]

    class Client(asyncio.DatagramProtocol):
        def __init__(self) -> None:
            self.got: asyncio.Queue[bytes] = asyncio.Queue()

        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            self.got.put_nowait(data)

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        server, _ = await loop.create_datagram_endpoint(Echo, local_addr=(HOST, 0))
        address = server.get_extra_info("sockname")
        client, protocol = await loop.create_datagram_endpoint(Client, remote_addr=address)
        try:
            got = []
            for i in range(50):  # one at a time: loopback does not drop, but may reorder bursts
                client.sendto(b"datagram %d" % i)
                got.append(await protocol.got.get())
            return got
        finally:
            client.close()
            server.close()

    assert run(loop_name, main) == [b"DATAGRAM %d" % i for i in range(50)]


# -- A subprocess pipeline -------------------------------------------------------------

CHILD_UPPER = "import sys\nfor line in sys.stdin: sys.stdout.write(line.upper()); sys.stdout.flush()"
CHILD_COUNT = "import sys\ndata = sys.stdin.read()\nprint(len(data.splitlines()), len(data))\nsys.exit(3)"


def test_subprocess_pipeline(loop_name: str) -> None:
    """``producer | upper | count``: three children, the loop carries the bytes between them."""
    require(loop_name, "subprocess_exec")

    async def main() -> tuple[bytes, int, int, bytes]:
        produce = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "for i in range(2000): print('line', i)",
            stdout=asyncio.subprocess.PIPE)
        upper = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD_UPPER,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        count = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD_COUNT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while chunk := await source.read(4096):
                sink.write(chunk)
                await sink.drain()
            sink.close()

        assert produce.stdout and upper.stdin and upper.stdout and count.stdin
        await asyncio.gather(pump(produce.stdout, upper.stdin), pump(upper.stdout, count.stdin))
        out, err = await count.communicate()
        return out, await produce.wait(), count.returncode, err

    out, produce_status, count_status, err = run(loop_name, main)
    expected = "".join(f"LINE {i}\n" for i in range(2000))
    assert out.split() == [b"2000", str(len(expected)).encode()]
    assert (produce_status, count_status, err) == (0, 3, b"")


def test_subprocess_large_stdin_and_stdout(loop_name: str) -> None:
    """4 MiB through ``cat``, written and read at once: pipe flow control both ways."""
    require(loop_name, "subprocess_exec")
    data = os.urandom(4 * MIB)

    async def main() -> tuple[bytes, int]:
        cat = await asyncio.create_subprocess_exec("cat", stdin=asyncio.subprocess.PIPE,
                                                   stdout=asyncio.subprocess.PIPE)
        out, _ = await cat.communicate(data)
        return out, cat.returncode

    out, status = run(loop_name, main)
    assert (len(out), status) == (len(data), 0)
    assert out == data


def test_subprocess_kill_and_shell(loop_name: str) -> None:
    require(loop_name, "subprocess_exec")
    require(loop_name, "subprocess_shell")

    async def main() -> tuple[int, bytes]:
        sleeper = await asyncio.create_subprocess_exec(sys.executable, "-c",
                                                       "import time; time.sleep(60)")
        sleeper.kill()
        killed = await sleeper.wait()
        shell = await asyncio.create_subprocess_shell("echo one two | wc -w",
                                                      stdout=asyncio.subprocess.PIPE)
        out, _ = await shell.communicate()
        return killed, out

    killed, out = run(loop_name, main)
    assert killed == -signal.SIGKILL
    assert out.strip() == b"2"


# -- Signals ----------------------------------------------------------------------------

def test_signal_handlers(loop_name: str) -> None:
    """add_signal_handler runs its callback on the loop; remove_signal_handler restores the default."""
    require(loop_name, "add_signal_handler")

    async def main() -> tuple[list[int], bool, bool]:
        loop = asyncio.get_running_loop()
        got: list[int] = []
        done = loop.create_future()

        def on_signal(signum: int) -> None:
            got.append(signum)
            if len(got) == 2:
                done.set_result(None)

        loop.add_signal_handler(signal.SIGUSR1, on_signal, signal.SIGUSR1)
        loop.add_signal_handler(signal.SIGUSR2, on_signal, signal.SIGUSR2)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.sleep(0.05)
            os.kill(os.getpid(), signal.SIGUSR2)
            await done
        finally:
            removed = loop.remove_signal_handler(signal.SIGUSR1)
            loop.remove_signal_handler(signal.SIGUSR2)
        return got, removed, loop.remove_signal_handler(signal.SIGUSR1)

    got, removed, removed_again = run(loop_name, main)
    assert got == [signal.SIGUSR1, signal.SIGUSR2]
    assert (removed, removed_again) == (True, False)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


SIGINT_CHILD = """\
import asyncio, pkgutil, sys
sys.path.insert(0, {root!r})
factory = pkgutil.resolve_name({spec!r})

async def main():
    try:
        print("ready", flush=True)
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        print("cancelled", flush=True)
        raise
    finally:
        print("cleaned up", flush=True)

try:
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_stops_run_cleanly(loop_name: str) -> None:
    """SIGINT cancels main(), its finally runs, and Runner.run raises KeyboardInterrupt."""
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)
    child = subprocess.Popen([sys.executable, "-c", SIGINT_CHILD.format(root=root, spec=loop_spec(loop_name))],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.3)  # Ctrl-C comes while the loop is idle, blocked in its wait
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=LIMIT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out.splitlines() == ["cancelled", "cleaned up", "KeyboardInterrupt"]
    assert child.returncode == 130


# -- TLS --------------------------------------------------------------------------------

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def certificates() -> Iterator[tuple[ssl.SSLContext, ssl.SSLContext]]:
    """(server context, client context) for "localhost", signed by a CA made for this module."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", HOST).configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    yield server, client


def test_tls_echo(loop_name: str, certificates: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """Streams over TLS: handshake, certificate checked by name, 256 KiB echoed, clean close."""
    require(loop_name, "start_tls")
    server_context, client_context = certificates
    payload = os.urandom(256 * 1024)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()

    async def main() -> tuple[bytes, Any, Any]:
        server = await asyncio.start_server(handle, HOST, 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(
                HOST, port, ssl=client_context, server_hostname="localhost")
            peercert = writer.get_extra_info("peercert")
            cipher = writer.get_extra_info("cipher")
            received = bytearray()

            async def send() -> None:
                writer.write(payload)
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()

            sending = asyncio.create_task(send())
            while len(received) < len(payload):
                chunk = await reader.read(65536)
                assert chunk, "the TLS stream ended early"
                received += chunk
            await sending
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            return bytes(received), peercert, cipher

    received, peercert, cipher = run(loop_name, main)
    assert received == payload
    assert ("DNS", "localhost") in peercert["subjectAltName"]
    assert cipher and cipher[1].startswith("TLSv1.")


def test_tls_wrong_hostname_fails(loop_name: str,
                                  certificates: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """A certificate for another name fails the handshake with SSLCertVerificationError."""
    require(loop_name, "start_tls")
    server_context, client_context = certificates

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, HOST, 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(HOST, port, ssl=client_context,
                                              server_hostname="example.org")

    run(loop_name, main)
