# benchmarks/servers.py
"""Every server the harness can measure, and how to get each running.

A stage (``python -m tinyloop serve STAGE``) and a peer (benchmarks/peers/) are both an argument
list that takes ``--port 0`` and prints the announce line.  A server that cannot run here is skipped
with a note.  Compiled peers build into benchmarks/build/ (git-ignored) when their source is newer,
offline: standard libraries only, Go's caches in the build folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness import process
from benchmarks.harness.machine import display, package_version, version_line
from tinyloop import stages
from tinyloop.testing import ServerProcess

__all__ = ["BASELINE", "BUILD", "PEERS", "Server", "build_c", "c_peer", "choose", "go_peer", "import_note",
           "launch", "peer_argv", "peer_server", "prepare", "start", "stage_server", "tool_versions", "uring_note"]

PEER_DIR = Path(__file__).resolve().parent / "peers"
BUILD = PEER_DIR.parent / "build"

# The row every ratio in the table is relative to.
BASELINE = "asyncio-protocol"


@dataclass(frozen=True)
class Server:
    """Something to measure: ``kind`` is ``"stage"``, ``"peer"`` or an experiment's own; ``argv``
    starts it listening on a free port; ``env`` adds environment variables.  ``needs`` names what
    must exist here, a Python module (``"module:uvloop"``) or a program on PATH (``"go"``);
    ``setup`` (if any) builds or checks it: None when ready, else why not; ``default`` is false for
    a peer only the harness's own tests ask for."""

    name: str
    kind: str
    summary: str
    argv: tuple[str, ...]
    chapter: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    needs: str | None = None
    setup: Callable[[], str | None] | None = None
    default: bool = True

    def entry(self, skipped: str | None) -> dict:
        """Its entry in an experiment's JSON ``servers``; ``skipped``: None, or why it did not run."""
        return {"name": self.name, "kind": self.kind, "summary": self.summary, "chapter": self.chapter,
                "command": display(self.argv), "env": self.env or None, "skipped": skipped}

    def status(self, skipped: str | None) -> str:
        """Its line in ``--list``: kind, name, and whether it can run here."""
        return f"{self.kind:<5}  {self.name:<16}  {'skipped: ' + skipped if skipped else 'ready'}"


def peer_argv(script: str, *args: str) -> tuple[str, ...]:
    """``python benchmarks/peers/SCRIPT ARGS --port 0`` (``node`` for a ``.js``)."""
    return ("node" if script.endswith(".js") else sys.executable, str(PEER_DIR / script), *args, "--port", "0")


def c_peer(name: str, summary: str, program: str, libs: Sequence[str] = (),
           check: Callable[[], str | None] | None = None) -> Server:
    """benchmarks/peers/c/PROGRAM.c, built into benchmarks/build/PROGRAM by :func:`build_c`, linked
    with ``libs`` (``"uring"``: ``-luring``); ``check`` (if any) says first why it cannot run here."""
    binary = BUILD / program
    return Server(name, "peer", summary, (str(binary), "--port", "0"), needs="cc",
                  setup=lambda: (check and check()) or build_c(binary, PEER_DIR / "c" / f"{program}.c", libs))


def uring_note() -> str | None:
    """None when a C program on io_uring can build and run here: the kernel allows io_uring
    (``tinyloop.raw.uring.unavailable()``) and liburing's header is installed; else why not."""
    from tinyloop.raw import uring
    if reason := uring.unavailable():
        return reason
    try:
        found = subprocess.run([os.environ.get("CC", "cc"), "-E", "-x", "c", "-", "-o", os.devnull],
                               input="#include <liburing.h>\n", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot look for liburing: {error}"
    return None if found.returncode == 0 else "liburing is not installed (Debian: liburing-dev)"


def go_peer(name: str, summary: str, binary: str, package: str) -> Server:
    """Go ``package`` (``"./echo"``) of benchmarks/peers/go, built into benchmarks/build/BINARY by
    :func:`build_go`, run with GOMAXPROCS=1."""
    path = BUILD / binary
    return Server(name, "peer", f"{summary}, GOMAXPROCS=1", (str(path), "-port", "0"), needs="go",
                  env={"GOMAXPROCS": "1"}, setup=lambda: build_go(path, package))


def _asyncio(loop: str, api: str, summary: str, setup: Callable[[], str | None] | None = None,
             default: bool = True) -> Server:
    return Server(f"{loop}-{api}", "peer", summary, peer_argv("asyncio_server.py", "--loop", loop, "--api", api),
                  needs=None if loop == "asyncio" else f"module:{loop}", setup=setup, default=default)


def _uringcore_note() -> str | None:
    """None when uringcore imports and io_uring is allowed here; else why not."""
    from tinyloop.raw import uring
    return import_note("uringcore", lambda: importlib.import_module("uringcore")) or uring.unavailable()


PEERS: tuple[Server, ...] = (
    _asyncio("asyncio", "protocol", "stdlib asyncio, Protocol callbacks (the baseline of every ratio)"),
    _asyncio("asyncio", "streams", "stdlib asyncio, start_server streams"),
    _asyncio("uvloop", "protocol", "the same Protocol code on uvloop"),
    _asyncio("uvloop", "streams", "the same streams code on uvloop"),
    _asyncio("rloop", "protocol", "the same Protocol code on rloop (Rust)"),
    _asyncio("rloop", "streams", "the same streams code on rloop (Rust)"),
    # Asked for by name only: uringcore 0.9.1 slows to a few answers a second after about a thousand
    # requests, so a default run would spend its warm-ups waiting on it (--peers uringcore-protocol).
    _asyncio("uringcore", "protocol", "the same Protocol code on uringcore (io_uring, Rust)", _uringcore_note,
             default=False),
    _asyncio("uringcore", "streams", "the same streams code on uringcore (io_uring, Rust)", _uringcore_note,
             default=False),
    go_peer("go-nethttp", "Go net/http", "go-nethttp", "."),
    Server("node-http", "peer", "Node.js http module", peer_argv("node/server.js"), needs="node"),
    c_peer("c-epoll", "the floor: a minimal C server on epoll, no Python", "http_floor"),
    c_peer("c-uring", "the completion floor: the same C server on io_uring (liburing), multishot accept "
           "and receive on provided buffers", "http_uring_floor", libs=("uring",), check=uring_note),
    Server("stall", "peer", "serves one connection, then answers nothing (tests the time-outs)",
           peer_argv("stall_server.py"), default=False),
)

_PEERS = {server.name: server for server in PEERS}


def import_note(module: str, load: Callable[[], object]) -> str | None:
    """None when ``load()`` (an import) works, else ``"MODULE does not import (Error: its first line)"``."""
    try:
        load()
    except Exception as error:  # noqa: BLE001 - any failure means "skip, and say why"
        first = str(error).splitlines()[0] if str(error) else ""
        return f"{module} does not import ({type(error).__name__}: {first})"
    return None


def stage_server(stage: stages.Stage) -> Server:
    """The server for one row of ``tinyloop.stages.STAGES``."""
    argv = (sys.executable, "-m", "tinyloop", "serve", stage.name, "--host", "127.0.0.1", "--port", "0")
    return Server(stage.name, "stage", stage.summary, argv, chapter=stage.chapter,
                  setup=lambda: import_note(stage.module, lambda: stages.load(stage.name)))


def peer_server(name: str) -> Server:
    """The HTTP peer called ``name``; raises ``KeyError`` for an unknown name."""
    return _PEERS[name]


def choose(stage_names: str | None, peer_names: str | None) -> list[Server]:
    """The servers ``--stages`` and ``--peers`` name (comma lists, ``all`` or ``none``; None: every
    stage, and every peer but those only the tests ask for), stages first; an unknown name exits
    with the choices (harness.process.choose_names)."""
    every_stage = [stage.name for stage in stages.STAGES]
    chosen_stages = process.choose_names(stage_names, every_stage, "stage", every_stage)
    chosen_peers = process.choose_names(peer_names, list(_PEERS), "peer", [p.name for p in PEERS if p.default])
    return [stage_server(stages.get(name)) for name in chosen_stages] + [_PEERS[name] for name in chosen_peers]


def prepare(server: Server) -> str | None:
    """Make ``server`` ready to start: None if it is (its needs are installed, its ``setup``, a
    build or a stage's import, succeeds), else a note saying why not."""
    module = (server.needs or "").partition("module:")[2]
    if module and importlib.util.find_spec(module) is None:
        return f"Python module {module} is not installed"
    if server.needs and not module and shutil.which(server.needs) is None:
        return f"{server.needs} is not on PATH"
    return server.setup() if server.setup else None


def build(binary: Path, sources: Sequence[Path], command: Callable[[Path], list[str]], *,
          cwd: Path | None = None, env: dict[str, str] | None = None) -> str | None:
    """Build ``binary`` with ``command(output_path)`` unless it is newer than every source; None on
    success, else a note.  One rename puts it in place: nobody starts a half-written binary."""
    if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return None
    BUILD.mkdir(exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
    argv = command(partial)
    print(f"building {binary.name}: {' '.join(argv)}", flush=True)
    try:
        done = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()
            return f"build failed: {lines[-1] if lines else f'exit code {done.returncode}'}"
        os.replace(partial, binary)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"build failed: {error}"
    finally:
        partial.unlink(missing_ok=True)
    return None


def build_c(binary: Path, source: Path, libs: Sequence[str] = ()) -> str | None:
    """Build one C file of benchmarks/peers/c, ``cc -O2`` (``$CC`` if set) with ``-lLIB`` for each of
    ``libs``, as :func:`build` does (it may include any of the headers there, what the floors and
    the echo client share)."""
    return build(binary, [source, *sorted((PEER_DIR / "c").glob("*.h"))],
                 lambda out: [os.environ.get("CC", "cc"), "-O2", "-o", str(out), str(source),
                              *(f"-l{lib}" for lib in libs)])


def build_go(binary: Path, package: str) -> str | None:
    """Build Go ``package`` of benchmarks/peers/go offline (its caches in BUILD), as :func:`build` does
    (every package imports announce, the listener and announce line they share)."""
    sources = [PEER_DIR / "go" / part for part in (f"{package}/main.go", "go.mod", "announce/announce.go")]
    return build(binary, sources, lambda out: ["go", "build", "-o", str(out), package], cwd=PEER_DIR / "go",
                 env={"GOCACHE": str(BUILD / "gocache"), "GOPATH": str(BUILD / "gopath"),
                      "GOTOOLCHAIN": "local", "GOFLAGS": "", "CGO_ENABLED": "0"})


def launch(server: Server, prefix: Sequence[str] = (), timeout: float = 15.0) -> ServerProcess:
    """Start ``server`` (with ``prefix``, e.g. ``taskset -c 0``, before its command) and
    return the running ServerProcess; raises ``RuntimeError`` if it does not announce its port."""
    return process.launch(server.name, server.argv, env=server.env, prefix=prefix, timeout=timeout)


def start(server: Server, prefix: Sequence[str] = (), warmup: int = 0,
          timeout: float = 5.0) -> tuple[ServerProcess | None, tuple[str, str] | None]:
    """Launch ``server`` and warm it up with ``warmup`` ``GET /`` (process.warm_up; 0: none).  Returns
    ``(process, None)``, the caller to stop it, or ``(None, (status, note))``, the server stopped."""
    try:
        running = launch(server, prefix)
    except RuntimeError as error:
        return None, ("error", "did not start: " + " | ".join(str(error).strip().splitlines()[:3]))
    try:
        failure = process.warm_up(running.address, warmup, timeout) if warmup else None
    except BaseException:
        running.stop()  # interrupted in the warm-up: the caller never got it to stop
        raise
    if failure is not None:
        running.stop()
        return None, failure
    return running, None


def tool_versions() -> dict[str, str | None]:
    """The version line of every program and library the numbers depend on (None: absent)."""
    versions: dict[str, str | None] = {  # version_line: None where the program does not run
        name: version_line(argv) for name, argv in (
            ("ab", ["ab", "-V"]), ("wrk", ["wrk", "-v"]), ("go", ["go", "version"]),
            ("node", ["node", "--version"]),
            ("cc", [os.environ.get("CC", "cc"), "--version"]), ("taskset", ["taskset", "--version"]))}
    return {**versions, **{name: package_version(name) for name in ("uvloop", "rloop", "uringcore", "matplotlib")}}
