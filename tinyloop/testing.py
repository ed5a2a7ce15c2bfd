"""Helpers shared by the tests, the exercise checker and the benchmark harness:
start a stage's server in its own process, find its port, look at its file
descriptors and CPU time, and stop it the way a user would (SIGTERM); hold
thousands of keep-alive connections to it from one thread (Crowd).
"""

from __future__ import annotations

import errno
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from tinyloop.serving import NUDGER_NAME

__all__ = ["Crowd", "ServerProcess", "asyncio_loop_stages", "http_get", "nofile_at_least", "recv_response"]

def asyncio_loop_stages() -> list[str]:
    """The names of the stages whose loop is an asyncio event loop, in reading order.

    Today ``["aio", "uv"]``: the rows that tests written against the
    asyncio API (the conformance suite, the real programs, TLS, Unix) run
    on, beside stdlib asyncio and uvloop.  Nothing is imported, so a stage
    whose extension is not built here is still listed: ask its
    ``Stage.unavailable()`` why it cannot run (the tests skip with that).

    Discussion: how is an asyncio loop told from Part II's reactor without
    making one?  By the factory's name.  ``asyncio.new_event_loop`` and
    ``uvloop.new_event_loop`` are how a program gets an asyncio loop, and
    Parts III and IV offer the same name (tinyloop/aio, tinyloop/uv); Part
    II's reactor is named by its class, ``Loop``, and takes a selector.
    """
    from tinyloop import stages

    return [stage.name for stage in stages.STAGES
            if stage.loop is not None and stage.loop.endswith(":new_event_loop")]


# Seconds stop() waits for the output readers after the server has exited: its
# pipes end at once unless a child of its own still holds them.
READERS_TIMEOUT = 2.0

_ANNOUNCE = re.compile(r"serving \S+ on http://\[?([^\]/]+?)\]?:(\d+)/")


class ServerProcess:
    """Run ``python -m tinyloop serve STAGE --port 0`` and wait until it listens.

    Use as a context manager; on exit the server gets SIGTERM and, if it has
    not stopped within ``timeout`` seconds, SIGKILL.  ``env`` adds variables
    to the server's environment (the checker sets ``TINYLOOP_OVERRIDE``).
    ``command`` runs another server instead of ``python -m tinyloop serve STAGE``
    (the benchmark's peers); it must print the same announce line.
    Standard error is collected in ``stderr_lines`` for assertions.
    ``nofile`` sets the server's soft limit on open descriptors
    (RLIMIT_NOFILE, see getrlimit(2)) in the child before it runs the
    server, so a test can put a server at its descriptor limit.

    Raises ``RuntimeError`` with the server's own output if it exits, or has
    not announced its port within ``timeout`` seconds.
    """

    def __init__(self, stage: str, *, env: Mapping[str, str] | None = None,
                 timeout: float = 15.0, host: str = "127.0.0.1",
                 command: Sequence[str] | None = None, nofile: int | None = None) -> None:
        self.stage = stage
        self.nofile = nofile
        self.timeout = timeout
        self.host = host
        self.command = list(command or [sys.executable, "-m", "tinyloop", "serve", stage,
                                        "--host", host, "--port", "0"])
        self._env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.stderr_lines: list[str] = []
        self.stdout_lines: list[str] = []
        self._readers: list[threading.Thread] = []  # take the server's output, to its end

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ServerProcess:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=self._env,
                                     preexec_fn=self._limit if self.nofile is not None else None)
        self._readers = [threading.Thread(target=self._drain, args=(self.proc.stderr, self.stderr_lines),
                                          daemon=True)]
        deadline = time.monotonic() + self.timeout
        found = threading.Event()

        def read_stdout() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.stdout_lines.append(line)
                match = _ANNOUNCE.search(line)
                if match and not found.is_set():
                    self.port = int(match.group(2))
                    found.set()

        self._readers.append(threading.Thread(target=read_stdout, daemon=True))
        for reader in self._readers:
            reader.start()
        try:
            while not found.wait(0.05):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"server {self.stage!r} did not start (exit code {self.proc.returncode}):\n"
                        + "".join(self.stdout_lines + self.stderr_lines))
        except BaseException:
            self.stop()  # interrupted while waiting (Ctrl-C, a SIGTERM made one): leave no server
            raise
        return self

    def _limit(self) -> None:
        # Runs in the child between fork and exec: the limit is the server's
        # alone (setrlimit(2) is per process; the exec keeps it).
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, hard))

    @staticmethod
    def _drain(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def stop(self) -> int:
        """Send SIGTERM, wait, and return the exit code (SIGKILL after ``timeout``).

        Then wait (at most READERS_TIMEOUT seconds) for the threads that read
        the server's stdout and stderr to reach the end of both pipes, so that
        ``stdout_lines`` and ``stderr_lines`` hold the last lines it printed.
        """
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The process has exited, but its last lines may still be in the pipes:
        # a reader thread is not scheduled the moment wait() returns.
        for reader in self._readers:
            reader.join(READERS_TIMEOUT)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def connect(self, timeout: float = 5.0) -> socket.socket:
        """A new client socket connected to the server."""
        return socket.create_connection(self.address, timeout=timeout)

    def fd_count(self) -> int:
        """How many file descriptors the server holds (Linux: /proc/PID/fd)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def cpu_seconds(self) -> float:
        """User + system CPU time the server has used, in seconds (Linux: /proc/PID/stat)."""
        fields = self._stat_fields()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def minor_faults(self) -> int:
        """Minor page faults the server has taken so far (Linux: /proc/PID/stat's minflt).

        A fault on memory the process just mapped or grew its heap into:
        mostly allocation the kernel had to back with fresh pages.  See proc(5).
        """
        return int(self._stat_fields()[7])

    def _stat_fields(self) -> list[str]:
        # /proc/PID/stat after the command name, which may hold spaces and
        # parentheses: fields[0] is proc(5)'s field 3 (state).
        with open(f"/proc/{self.pid}/stat") as f:
            return f.read().rpartition(")")[2].split()

    def rss_bytes(self) -> int:
        """The server's resident memory now, in bytes (Linux: VmRSS in /proc/PID/status)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel counts in KiB
        raise RuntimeError(f"no VmRSS for process {self.pid}: has it exited?")

    def thread_count(self) -> int:
        """How many threads the server runs (Linux: /proc/PID/task).

        The thread tinyloop.serving.stop_on_sigterm starts (named
        ``NUDGER_NAME``) is not counted: it serves no client.  At most one
        thread of that name is left out, so naming more buys a server nothing.
        """
        named = 0
        tids = os.listdir(f"/proc/{self.pid}/task")
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as comm:
                    named += comm.read().rstrip("\n") == NUDGER_NAME
            except OSError:
                pass  # it ended meanwhile
        return len(tids) - min(named, 1)


def recv_response(sock: socket.socket, buffer: bytearray | None = None) -> tuple[int, dict[bytes, bytes], bytes]:
    """Read one whole response from ``sock``: ``(status, headers, body)``.

    ``buffer`` carries bytes read past one response into the next call, for
    pipelining.  Header names come back lower-cased.  Raises ``ConnectionError``
    if the peer closes before the response is complete.
    """
    buf = buffer if buffer is not None else bytearray()
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed after {bytes(buf)!r}")
        buf += chunk
    head, _, _ = bytes(buf).partition(b"\r\n\r\n")
    del buf[: len(head) + 4]
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get(b"content-length", b"0"))
    if status == 100:
        return recv_response(sock, buf)
    while len(buf) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed in the middle of a body")
        buf += chunk
    body = bytes(buf[:length])
    del buf[:length]
    return status, headers, body


def http_get(address: tuple[str, int], path: str = "/", timeout: float = 5.0) -> tuple[int, bytes]:
    """One ``GET`` on a new connection with ``Connection: close``: ``(status, body)``."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n" % path.encode())
        status, _, body = recv_response(sock)
        return status, body


@contextmanager
def nofile_at_least(need: int) -> Iterator[bool]:
    """Raise this process's soft RLIMIT_NOFILE to ``need`` descriptors for the ``with`` block.

    A server started inside inherits it (getrlimit(2): a child keeps its
    parent's limits).  Yields False, changing nothing, when the hard limit is
    below ``need`` (a test then skips); the old soft limit is restored after.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        yield True
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        yield False
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    try:
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Crowd:
    """Many keep-alive HTTP connections to one server, driven from one thread.

    ``open(count)`` connects ``count`` non-blocking sockets (at most
    ``batch`` connecting at once, so the server's accept queue never
    overflows and no SYN waits a second for its retry); ``ask()`` sends one
    GET on every connection and reads every response, all at once, with
    ``selectors`` (epoll on Linux); the connections stay open between
    rounds, which is the point: a server must hold them all.  ``close()``
    (or the end of the ``with`` block) closes them.

    The caller needs a descriptor per connection: see
    :func:`nofile_at_least`.  Every wait is bounded by ``timeout`` seconds
    per call; past it ``TimeoutError`` says how far it got.  Used by
    tests/test_uv_many_connections.py and benchmarks/memory.py.
    """

    REQUEST = b"GET / HTTP/1.1\r\nHost: crowd\r\n\r\n"

    def __init__(self, address: tuple[str, int], *, timeout: float = 60.0, batch: int = 256) -> None:
        self.address = address
        self.timeout = timeout
        self.batch = batch
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> Crowd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.sockets)

    def open(self, count: int) -> None:
        """Add ``count`` connected sockets.  Raises OSError if a connect fails."""
        deadline = time.monotonic() + self.timeout
        wanted = len(self.sockets) + count
        connecting = 0
        with selectors.DefaultSelector() as selector:
            while len(self.sockets) < wanted:
                while connecting < self.batch and len(self.sockets) + connecting < wanted:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sock.setblocking(False)
                    code = sock.connect_ex(self.address)
                    if code not in (0, errno.EINPROGRESS):
                        sock.close()
                        raise OSError(code, f"connect: {os.strerror(code)}")
                    selector.register(sock, selectors.EVENT_WRITE)
                    connecting += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    for key in list(selector.get_map().values()):
                        key.fileobj.close()  # type: ignore[union-attr]
                    raise TimeoutError(f"{len(self.sockets)} of {wanted} connections after {self.timeout} s")
                for key, _ in selector.select(min(remaining, 1.0)):
                    sock = key.fileobj  # type: ignore[assignment]
                    selector.unregister(sock)
                    connecting -= 1
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:
                        sock.close()
                        raise OSError(code, f"connect: {os.strerror(code)}")
                    self.sockets.append(sock)

    def ask(self, request: bytes = REQUEST) -> list[tuple[int, bytes]]:
        """Send ``request`` on every connection; ``(status, body)`` of each answer, in order.

        A connection the server closed instead of answering gives
        ``(0, what it sent)``.  Raises TimeoutError past ``timeout``.
        """
        deadline = time.monotonic() + self.timeout
        answers: list[tuple[int, bytes] | None] = [None] * len(self.sockets)
        buffers = [bytearray() for _ in self.sockets]
        with selectors.DefaultSelector() as selector:
            for index, sock in enumerate(self.sockets):
                if sock.send(request) != len(request):   # a few bytes into an empty buffer
                    raise OSError(f"connection {index}: the request did not fit the send buffer")
                selector.register(sock, selectors.EVENT_READ, index)
            waiting = len(self.sockets)
            while waiting:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{len(self.sockets) - waiting} of {len(self.sockets)} "
                                       f"answers after {self.timeout} s")
                for key, _ in selector.select(min(remaining, 1.0)):
                    index = key.data
                    buf = buffers[index]
                    chunk = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    buf += chunk
                    answer = _complete_response(buf) if chunk else (0, bytes(buf))
                    if answer is not None:
                        answers[index] = answer
                        selector.unregister(key.fileobj)
                        waiting -= 1
        return answers  # type: ignore[return-value]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()


def _complete_response(buf: bytearray) -> tuple[int, bytes] | None:
    """``(status, body)`` if ``buf`` holds one whole response with a Content-Length, else None."""
    head, found, rest = bytes(buf).partition(b"\r\n\r\n")
    if not found:
        return None
    lines = head.split(b"\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if len(rest) < length:
        return None
    return int(lines[0].split()[1]), rest[:length]
