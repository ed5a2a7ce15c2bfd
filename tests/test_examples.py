# tests/test_examples.py
#
# Every program in examples/ run as a reader runs it, on every loop of
# examples/_loops.py: as a child process, with ``--loop NAME``.
#
# Rules this file keeps:
#   * Servers are started with ``--port 0``, found by their "listening on
#     HOST:PORT" line, talked to (with the client example where there is
#     one), and stopped with SIGTERM or SIGINT while a client is still
#     connected: they must exit 0 within STOP seconds, having said "stopped".
#   * The crawler crawls its own site, and its report's counts are checked
#     against the site's design (see page_links in examples/crawler.py).
#   * Every wait is bounded (LIMIT, STOP); a child left running is killed.

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tinyloop.testing import ServerProcess


ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LIMIT = 30.0  # seconds an example may take to do its job
STOP = 10.0   # seconds a server may take to stop after SIGTERM/SIGINT
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "PYTHONUNBUFFERED": "1"}


def _load_loops() -> Any:
    spec = importlib.util.spec_from_file_location("examples_loops", EXAMPLES / "_loops.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOOPS = _load_loops()
LOOP_NAMES = list(LOOPS.LOOPS)
PROGRAMS = sorted(path.stem for path in EXAMPLES.glob("*.py") if not path.name.startswith("_"))


@pytest.fixture(params=LOOP_NAMES)
def loop_name(request: pytest.FixtureRequest) -> str:
    try:
        LOOPS.loop_factory(request.param)
    except ImportError as exc:
        pytest.skip(f"loop {request.param} is not installed: {exc}")
    return request.param


def command(program: str, *args: str) -> list[str]:
    return [sys.executable, str(EXAMPLES / f"{program}.py"), *args]


def run_example(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run an example to its end; its stdout and stderr, and exit status."""
    return subprocess.run(command(program, *args), capture_output=True, text=True, env=ENV,
                          stdin=subprocess.DEVNULL, timeout=LIMIT)


class Server:
    """An example server in a child process: started, found, and stopped by a signal."""

    def __init__(self, program: str, *args: str) -> None:
        self.proc = subprocess.Popen(command(program, "--port", "0", *args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                     env=ENV)
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        # readline() blocks, but the server prints this line within a second
        # of starting; if it dies instead, readline returns "" at once.
        for line in self.proc.stdout:
            self.lines.append(line)
            if match := re.search(r"listening on ([\d.]+):(\d+)", line):
                self.port = int(match.group(2))
                return
        self.proc.wait(STOP)
        raise RuntimeError(f"{program} did not start: {''.join(self.lines)}{self.proc.stderr.read()}")

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Send ``signum``; (exit status, rest of stdout, stderr) once it has exited."""
        self.proc.send_signal(signum)
        try:
            out, err = self.proc.communicate(timeout=STOP)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"did not stop within {STOP} s after signal {signum}: {err}") from None
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@contextlib.contextmanager
def serving(program: str, *args: str) -> Iterator[Server]:
    server = Server(program, *args)
    try:
        yield server
    finally:
        server.kill()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=LIMIT)


class LineClient:
    """A socket read a line at a time (each read bounded by the socket's timeout)."""

    def __init__(self, port: int) -> None:
        self.sock = connect(port)
        self.file = self.sock.makefile("rb")

    def line(self) -> str:
        """The next line, without its newline; "" at EOF."""
        return self.file.readline().decode().rstrip("\n")

    def rest(self) -> list[str]:
        """Every line until the server closes the connection."""
        return [line.decode().rstrip("\n") for line in self.file]

    def send(self, text: str) -> None:
        self.sock.sendall(text.encode() + b"\n")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


# -- --help -------------------------------------------------------------------------------

def test_every_example_is_tested_and_documented() -> None:
    assert PROGRAMS == ["chat_server", "crawler", "echo_client", "echo_server", "http_fetch"]
    readme = (EXAMPLES / "README.md").read_text()
    for program in PROGRAMS:
        assert f"{program}.py" in readme, program


@pytest.mark.parametrize("program", PROGRAMS)
def test_help(program: str) -> None:
    done = run_example(program, "--help")
    assert done.returncode == 0, done.stderr
    assert "--loop {" + ",".join(LOOP_NAMES) + "}" in done.stdout
    assert (EXAMPLES / f"{program}.py").read_text().count('"""') >= 2  # a module docstring


# -- echo ---------------------------------------------------------------------------------

def test_echo_server_and_client(loop_name: str) -> None:
    with serving("echo_server", "--loop", loop_name) as server:
        port = str(server.port)
        words = run_example("echo_client", "--loop", loop_name, "--port", port, "hello", "world")
        assert (words.returncode, words.stdout) == (0, "hello\nworld\n"), words.stderr
        bulk = run_example("echo_client", "--loop", loop_name, "--port", port,
                           "--count", "20", "--size", "100000", "--connections", "4")
        assert bulk.returncode == 0, bulk.stderr
        assert bulk.stdout.startswith("echoed 80 messages of 100000 bytes (8000000 bytes) on 4 connection(s)")
        with connect(server.port) as idle:  # a client still connected when the server stops
            idle.sendall(b"ping")
            assert idle.recv(4) == b"ping"
            status, out, err = server.stop(signal.SIGTERM)
            assert idle.recv(1) == b""  # the server closed our connection on its way out
        assert status == 0 and "stopped" in err, (status, err)
        assert "".join(server.lines).startswith("echo server on ")


def test_echo_client_fails_without_a_server(loop_name: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        done = run_example("echo_client", "--loop", loop_name, "--port", str(port), "hello")
    assert done.returncode == 1
    assert "ConnectionRefusedError" in done.stderr


# -- chat ---------------------------------------------------------------------------------

def test_chat_server_broadcasts_to_every_other_client(loop_name: str) -> None:
    with serving("chat_server", "--loop", loop_name) as server:
        alice = LineClient(server.port)
        assert alice.line().startswith("welcome, you are guest-1 (1 here")
        bob = LineClient(server.port)
        assert bob.line().startswith("welcome, you are guest-2 (2 here")
        assert alice.line() == "* guest-2 joined"
        carol = LineClient(server.port)
        assert carol.line().startswith("welcome, you are guest-3 (3 here")
        assert (alice.line(), bob.line()) == ("* guest-3 joined", "* guest-3 joined")
        try:
            alice.send("/nick alice")
            assert [c.line() for c in (alice, bob, carol)] == ["* guest-1 is now alice"] * 3
            alice.send("hello, room")
            assert (bob.line(), carol.line()) == ("alice: hello, room", "alice: hello, room")
            carol.close()
            assert (alice.line(), bob.line()) == ("* guest-3 left", "* guest-3 left")
            bob.send("bye")
            assert alice.line() == "guest-2: bye"  # not echoed to bob: his next line is the goodbye
            # Ctrl-C with two clients connected: each is told, then disconnected.
            status, out, err = server.stop(signal.SIGINT)
            assert status == 0 and "stopped" in err, (status, err)
            assert alice.rest()[-1:] == bob.rest()[-1:] == ["* the server is shutting down"]
        finally:
            for client in (alice, bob, carol):
                client.close()


def test_chat_server_drops_a_client_that_stops_reading(loop_name: str) -> None:
    """A client that never reads is disconnected once its outbox is full; the room goes on."""
    import threading

    lines, size = 3000, 3000  # about 9 MB: past the kernel's buffers, the transport's and the outbox
    with serving("chat_server", "--loop", loop_name) as server:
        alice, bob, mallory = (LineClient(server.port) for _ in range(3))
        try:
            for client, joined in ((alice, 2), (bob, 1)):
                client.line()  # welcome
                for _ in range(joined):
                    client.line()  # "* guest-N joined"
            got: list[str] = []
            reading = threading.Thread(target=lambda: got.extend(bob.line() for _ in range(lines + 1)))
            reading.start()
            message = "z" * size
            for _ in range(lines):
                alice.send(message)
            reading.join(LIMIT)
            assert not reading.is_alive(), "bob did not get every line"
            said = [line for line in got if line.startswith("guest-1: ")]
            assert said == [f"guest-1: {message}"] * lines
            assert "* guest-3 left" in got  # mallory was dropped, and the room told
            assert server.proc.stdout is not None
            assert server.proc.stdout.readline() == "guest-3 stopped reading: disconnected\n"
        finally:
            for client in (alice, bob, mallory):
                client.close()


# -- http_fetch ---------------------------------------------------------------------------

def test_http_fetch_from_the_crawlers_site(loop_name: str) -> None:
    with serving("crawler", "--serve-only", "--loop", loop_name) as server:
        base = f"http://127.0.0.1:{server.port}"
        done = run_example("http_fetch", "--loop", loop_name, "--headers",
                           f"{base}/", f"{base}/page/1", f"{base}/missing/0")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert f"302 Found  {base}/  0 bytes  -" in lines
        assert "    location: /page/0" in lines
        assert any(line.startswith(f"200 OK  {base}/page/1  ") and line.endswith("text/html; charset=utf-8")
                   for line in lines), lines
        assert f"404 Not Found  {base}/missing/0  10 bytes  text/plain" in lines
        status, _, err = server.stop(signal.SIGTERM)
        assert status == 0, err


def test_http_fetch_from_tinyloops_own_server(loop_name: str) -> None:
    with ServerProcess("aio") as server:
        base = f"http://127.0.0.1:{server.port}"
        done = run_example("http_fetch", "--loop", loop_name, "--body", f"{base}/", f"{base}/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("200 OK  ") == 2, done.stdout


def test_http_fetch_reports_a_refused_connection(loop_name: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        done = run_example("http_fetch", "--loop", loop_name, url)
    assert done.returncode == 1
    assert done.stdout.startswith(f"ERR {url}  ConnectionRefusedError")


# -- crawler ------------------------------------------------------------------------------

def report_counts(output: str) -> dict[str, int]:
    return {name: int(value) for name, value in re.findall(r"^  ([a-z0-9 ]+):\s+(\d+)", output, re.M)}


# (arguments, expected counts).  With 30 pages: the redirect at /, 30 pages,
# 6 broken links (pages 0, 5, ... 25), 3 moved pages (3, 13, 23), and of the
# chain /hop/5 -> ... -> /hop/0 four fetches (max_redirect 3 follows three
# redirects, and the fourth is refused).  With 12 pages and max_redirect 10,
# the whole chain: six /hop/ fetches and nothing refused.
CRAWLS = [
    ([], {"urls fetched": 44, "200 ok": 30, "redirects": 8, "404 not found": 6,
          "other statuses": 0, "failed fetches": 0, "redirect limit hit": 1, "external skipped": 1}),
    (["--pages", "12", "--max-redirect", "10", "--max-tasks", "2"],
     {"urls fetched": 23, "200 ok": 12, "redirects": 8, "404 not found": 3,
      "other statuses": 0, "failed fetches": 0, "redirect limit hit": 0, "external skipped": 1}),
]


@pytest.mark.parametrize(("args", "expected"), CRAWLS, ids=["defaults", "small-site"])
def test_crawler_crawls_its_own_site(loop_name: str, args: list[str], expected: dict[str, int]) -> None:
    done = run_example("crawler", "--loop", loop_name, *args)
    assert done.returncode == 0, done.stderr
    counts = report_counts(done.stdout)
    max_tasks = int(args[args.index("--max-tasks") + 1]) if "--max-tasks" in args else 5
    assert 1 <= counts.pop("requests at once") <= max_tasks, done.stdout
    assert counts == expected, done.stdout
    assert f"on {loop_name} in " in done.stdout
    assert "https://example.org/elsewhere  (off the site: not followed)" in done.stdout
