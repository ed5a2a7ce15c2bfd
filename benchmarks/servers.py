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

__all__ = ["BASELINE", "BUILD", "PEERS", "Peer", "Server", "build", "build_c", "build_go", "choose", "launch",
           "peer_server", "prepare", "start", "stage_server", "tool_versions"]

HERE = Path(__file__).resolve().parent
PEER_DIR = HERE / "peers"
BUILD = HERE / "build"

# The row every ratio in the table is relative to.
BASELINE = "asyncio-protocol"


@dataclass(frozen=True)
class Server:
    """Something to measure: ``kind`` is ``"stage"`` or ``"peer"``; ``argv``
    starts it listening on a free port; ``env`` adds environment variables."""

    name: str
    kind: str
    summary: str
    argv: tuple[str, ...]
    chapter: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def display(self) -> str:
        """Its command as a reader would type it (``python`` for this interpreter)."""
        return display(self.argv)

    def entry(self, skipped: str | None) -> dict:
        """Its entry in an experiment's JSON ``servers``; ``skipped``: None, or why it did not run."""
        return {"name": self.name, "kind": self.kind, "summary": self.summary, "chapter": self.chapter,
                "command": self.display(), "env": self.env or None, "skipped": skipped}

    def status(self, skipped: str | None) -> str:
        """Its line in ``--list``: kind, name, and whether it can run here."""
        return f"{self.kind:<5}  {self.name:<16}  {'skipped: ' + skipped if skipped else 'ready'}"


@dataclass(frozen=True)
class Peer:
    """A peer's recipe.  ``needs`` names what must exist here: a Python module
    (``"module:uvloop"``) or a program on PATH (``"go"``); ``default`` is false
    for peers that only the harness's own tests ask for; ``argv`` and ``env``
    start it; ``setup`` (if any) builds or checks it: None when ready, else why not."""

    name: str
    summary: str
    needs: str | None = None
    default: bool = True
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[], str | None] | None = None

    def server(self) -> Server:
        return Server(self.name, "peer", self.summary, self.argv, env=self.env)

    def prepare(self) -> str | None:
        """None when the peer can start here (after its ``setup``), else a note saying why not."""
        module = self.needs.partition("module:")[2] if self.needs else ""
        if module and importlib.util.find_spec(module) is None:
            return f"Python module {module} is not installed"
        if self.needs and not module and shutil.which(self.needs) is None:
            return f"{self.needs} is not on PATH"
        return self.setup() if self.setup else None


def _python(script: str, *args: str) -> tuple[str, ...]:
    """``python benchmarks/peers/SCRIPT ARGS --port 0``."""
    return (sys.executable, str(PEER_DIR / script), *args, "--port", "0")


def _asyncio(loop: str, api: str, summary: str) -> Peer:
    return Peer(f"{loop}-{api}", summary, None if loop == "asyncio" else f"module:{loop}",
                argv=_python("asyncio_server.py", "--loop", loop, "--api", api))


PEERS: tuple[Peer, ...] = (
    _asyncio("asyncio", "protocol", "stdlib asyncio, Protocol callbacks (the baseline of every ratio)"),
    _asyncio("asyncio", "streams", "stdlib asyncio, start_server streams"),
    _asyncio("uvloop", "protocol", "the same Protocol code on uvloop"),
    _asyncio("uvloop", "streams", "the same streams code on uvloop"),
    Peer("go-nethttp", "Go net/http, GOMAXPROCS=1", "go", argv=(str(BUILD / "go-nethttp"), "-port", "0"),
         env={"GOMAXPROCS": "1"}, setup=lambda: build_go(BUILD / "go-nethttp", ".", [PEER_DIR / "go" / "main.go"])),
    Peer("node-http", "Node.js http module", "node", argv=("node", str(PEER_DIR / "node" / "server.js"), "--port", "0")),
    Peer("c-epoll", "the floor: a minimal C server on epoll, no Python", "cc",
         argv=(str(BUILD / "http_floor"), "--port", "0"),
         setup=lambda: build_c(BUILD / "http_floor", PEER_DIR / "c" / "http_floor.c")),
    Peer("stall", "serves one connection, then answers nothing (tests the time-outs)", default=False,
         argv=_python("stall_server.py")),
)

_PEERS = {peer.name: peer for peer in PEERS}


def stage_server(stage: stages.Stage) -> Server:
    """The server for one row of ``tinyloop.stages.STAGES``."""
    argv = (sys.executable, "-m", "tinyloop", "serve", stage.name, "--host", "127.0.0.1", "--port", "0")
    return Server(stage.name, "stage", stage.summary, argv, chapter=stage.chapter)


def peer_server(name: str) -> Server:
    """The server for peer ``name``; raises ``KeyError`` for an unknown name."""
    return _PEERS[name].server()


def choose(stage_names: str | None, peer_names: str | None) -> list[Server]:
    """The servers ``--stages`` and ``--peers`` name (comma lists, ``all`` or ``none``; None: every
    stage, and every peer but those only the tests ask for), stages first; an unknown name exits
    with the choices (harness.process.choose_names)."""
    every_stage = [stage.name for stage in stages.STAGES]
    return ([stage_server(stages.get(name)) for name in process.choose_names(stage_names, every_stage, "stage",
                                                                             every_stage)]
            + [peer_server(name) for name in process.choose_names(
                peer_names, list(_PEERS), "peer", [peer.name for peer in PEERS if peer.default])])


def prepare(server: Server) -> str | None:
    """Make ``server`` ready to start: None if it is (a stage's module imports; a peer's needs are
    installed and its build succeeds), else a note saying why not."""
    if server.kind != "stage":
        return _PEERS[server.name].prepare()
    try:
        stages.load(server.name)
    except Exception as error:  # noqa: BLE001 - any failure means "skip, and say why"
        first = str(error).splitlines()[0] if str(error) else ""
        return f"{stages.get(server.name).module} does not import ({type(error).__name__}: {first})"
    return None


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


def build_c(binary: Path, source: Path) -> str | None:
    """Build one C file of benchmarks/peers/c, ``cc -O2`` (``$CC`` if set), as :func:`build` does
    (it includes watch.h, the one helper they share)."""
    return build(binary, [source, PEER_DIR / "c" / "watch.h"],
                 lambda out: [os.environ.get("CC", "cc"), "-O2", "-o", str(out), str(source)])


def build_go(binary: Path, package: str, sources: Sequence[Path]) -> str | None:
    """Build Go ``package`` of benchmarks/peers/go offline (its caches in BUILD), as :func:`build` does
    (every package imports announce, the listener and announce line they share)."""
    return build(binary, [*sources, PEER_DIR / "go" / "go.mod", PEER_DIR / "go" / "announce" / "announce.go"],
                 lambda out: ["go", "build", "-o", str(out), package], cwd=PEER_DIR / "go",
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
            ("ab", ["ab", "-V"]), ("wrk", ["wrk", "-v"]), ("go", ["go", "version"]), ("node", ["node", "--version"]),
            ("cc", [os.environ.get("CC", "cc"), "--version"]), ("taskset", ["taskset", "--version"]))}
    return {**versions, "uvloop": package_version("uvloop"), "matplotlib": package_version("matplotlib")}
