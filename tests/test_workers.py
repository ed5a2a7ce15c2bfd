# tests/test_workers.py
#
# ``python -m tinyloop serve STAGE --workers N`` (tinyloop/workers.py): N
# processes on one port through SO_REUSEPORT, supervised by their parent.
# Which worker accepted a connection is read from the kernel, not from the
# app: the server's end of the connection is a socket inode in
# /proc/net/tcp, and exactly one worker holds that inode in /proc/PID/fd.
# Linux only (/proc); every server talks to 127.0.0.1 and is stopped by the
# test that started it.

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from tinyloop import cli, workers
from tinyloop.http import HELLO
from tinyloop.testing import ServerProcess, http_get, recv_response

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to find the workers"),
    pytest.mark.skipif(workers.reuse_port_missing() is not None,
                       reason=f"no SO_REUSEPORT here: {workers.reuse_port_missing()}"),
]

TIMEOUT = 15.0


def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether ``predicate()`` becomes true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def children(pid: int) -> set[int]:
    """The live (not zombie) child processes of ``pid``, from /proc/*/stat."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue  # exited while we looked
        state, ppid = fields[0], int(fields[1])
        if ppid == pid and state != "Z":
            out.add(int(entry))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` exists, as a process or a zombie."""
    return os.path.exists(f"/proc/{pid}")


def start(stage: str, count: int) -> ServerProcess:
    command = [sys.executable, "-m", "tinyloop", "serve", stage, "--port", "0", "--workers", str(count)]
    return ServerProcess(stage, command=command, timeout=TIMEOUT).start()


def worker_pids(server: ServerProcess, count: int) -> set[int]:
    """The server's ``count`` workers, once that many run."""
    assert eventually(lambda: len(children(server.pid)) == count), \
        f"expected {count} worker processes, found {children(server.pid)}"
    return children(server.pid)


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` holds (/proc/PID/fd links read ``socket:[N]``)."""
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def server_end_inode(server_port: int, client_port: int) -> int | None:
    """The inode of the server's socket of the connection from ``client_port`` (/proc/net/tcp, IPv4)."""
    with open("/proc/net/tcp") as f:
        next(f)  # the heading
        for line in f:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], int(fields[9])
            if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
                return inode
    return None


def accepting_worker(server: ServerProcess, client: socket.socket, pids: set[int]) -> int | None:
    """Which of ``pids`` holds the server's end of ``client``'s connection."""
    inode = server_end_inode(server.port, client.getsockname()[1])
    owners = [pid for pid in pids if inode is not None and inode in socket_inodes(pid)]
    return owners[0] if len(owners) == 1 else None


def test_connections_are_spread_over_every_worker() -> None:
    server = start("epoll", 2)
    clients: list[socket.socket] = []
    try:
        pids = worker_pids(server, 2)
        for _ in range(32):
            client = server.connect()
            clients.append(client)
            client.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")  # keep-alive: it stays open
            status, _, body = recv_response(client)
            assert (status, body) == (200, HELLO)
        owners = [accepting_worker(server, client, pids) for client in clients]
        assert None not in owners, f"every connection must be held by exactly one worker; got {owners}"
        # The kernel hashes each connection to one of the 2 sockets: all 32 on
        # one of them would happen once in 2**31 runs.
        assert set(owners) == pids, f"both workers should have accepted connections; owners: {owners}"
        assert server.pid not in owners  # the parent only binds: it takes no connection
    finally:
        for client in clients:
            client.close()
        assert server.stop() == 0


def test_a_killed_worker_is_restarted_and_the_port_keeps_answering() -> None:
    server = start("epoll", 2)
    try:
        before = worker_pids(server, 2)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        assert eventually(lambda: len(children(server.pid)) == 2 and victim not in children(server.pid)), \
            f"a new worker should replace pid {victim}; workers now: {children(server.pid)}"
        after = children(server.pid)
        assert len(after & before) == 1, f"only the killed worker is replaced: {before} -> {after}"
        assert eventually(lambda: any(f"(pid {victim}) was killed by SIGKILL" in line and "restarting" in line
                                      for line in server.stderr_lines)), server.stderr_lines
        for _ in range(20):
            assert http_get(server.address) == (200, HELLO)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("stage", ["epoll", "aio"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_stops_every_worker_and_exits_0(stage: str, signum: int) -> None:
    server = start(stage, 2)
    pids = worker_pids(server, 2)
    with server.connect() as idle:  # a client in the middle of nothing must not hold the stop up
        assert server.stdout_lines == [f"tinyloop: serving {stage} on http://127.0.0.1:{server.port}/\n"]
        assert server.proc is not None
        server.proc.send_signal(signum)
        code = server.proc.wait(TIMEOUT)
    assert code == 0, server.stderr_lines
    assert not any(alive(pid) for pid in pids), "no worker may outlive its parent"
    assert eventually(lambda: f"tinyloop: {stage}: stopped\n" in server.stderr_lines)
    # The port is free again: every worker closed its socket, and so did the
    # parent.  (SO_REUSEADDR: the idle client's connection may sit in TIME_WAIT.)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(server.address)


def test_workers_1_is_todays_single_process_server() -> None:
    server = start("epoll", 1)
    try:
        assert server.stdout_lines == [f"tinyloop: serving epoll on http://127.0.0.1:{server.port}/\n"]
        assert http_get(server.address) == (200, HELLO)
        assert children(server.pid) == set(), "--workers 1 serves in the process itself"
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("count", ["0", "-3", "two"])
def test_a_worker_count_below_1_is_refused(count: str) -> None:
    result = subprocess.run([sys.executable, "-m", "tinyloop", "serve", "epoll", "--port", "0",
                             "--workers", count], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 2
    assert "--workers" in result.stderr
    assert ("at least 1" in result.stderr) or ("whole number" in result.stderr)
    assert result.stdout == ""


def test_without_so_reuseport_several_workers_are_refused_with_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delattr(socket, "SO_REUSEPORT")
    assert cli.main(["serve", "epoll", "--port", "0", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "SO_REUSEPORT" in err and "--workers 1" in err


def test_a_worker_that_dies_at_start_is_restarted_with_a_growing_back_off() -> None:
    program = textwrap.dedent("""
        from tinyloop.workers import supervise

        def serve(listener):
            raise RuntimeError("this worker dies at once")

        raise SystemExit(supervise("crash", serve, "127.0.0.1", 0, 1))
    """)
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1.6)  # back-offs of 0.1, 0.2, 0.4 and 0.8 s: at most 5 starts in that time
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    restarts = [line for line in err.splitlines() if "restarting it in" in line]
    assert 2 <= len(restarts) <= 5, f"a worker that dies at start must be restarted, slowly:\n{err}"
    assert all("back-off" in line for line in restarts)
    delays = [float(line.split("restarting it in ")[1].split()[0]) for line in restarts]
    assert delays == sorted(delays) and delays[-1] > delays[0], f"the back-off must grow: {delays}"


def test_the_port_stays_reserved_while_the_parent_runs() -> None:
    server = start("epoll", 2)
    try:
        worker_pids(server, 2)
        with socket.socket() as other:  # a program without SO_REUSEPORT cannot take it
            with pytest.raises(OSError):
                other.bind(server.address)
    finally:
        assert server.stop() == 0


def test_closing_a_listener_resets_the_connections_in_its_accept_queue() -> None:
    # The chapter's claim about a worker that dies, checked on the kernel
    # itself: two sockets in one SO_REUSEPORT group, 16 clients connected
    # (handshake done, request sent) and none accepted; close one socket.
    # Its share is reset; the other socket's share is still there to accept.
    try:
        with open("/proc/sys/net/ipv4/tcp_migrate_req") as f:
            if f.read().strip() != "0":
                pytest.skip("net.ipv4.tcp_migrate_req is on: the queue moves to the other socket")
    except FileNotFoundError:
        pass  # before Linux 5.14: no migration at all
    first = workers.listen_reuseport("127.0.0.1", 0)
    port = first.getsockname()[1]
    clients: list[socket.socket] = []
    with workers.listen_reuseport("127.0.0.1", port) as second:
        try:
            for _ in range(16):
                client = socket.create_connection(("127.0.0.1", port), timeout=2)
                clients.append(client)
                client.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            first.close()
            second.setblocking(False)
            accepted = []
            while True:
                try:
                    accepted.append(second.accept()[0])
                except BlockingIOError:
                    break
            reset = 0
            for client in clients:
                client.settimeout(0.2)
                try:
                    reset += client.recv(1) == b""
                except ConnectionResetError:
                    reset += 1
                except TimeoutError:
                    pass  # alive: one of the accepted ones, waiting for an answer
            for sock in accepted:
                sock.close()
        finally:
            first.close()
            for client in clients:
                client.close()
    assert reset > 0, "the closed socket's queued connections must be reset (all 16 hashed elsewhere: 1 in 65536)"
    assert reset + len(accepted) == 16, f"{reset} reset, {len(accepted)} accepted by the other socket"


# --- the benchmark's plumbing (benchmarks/workers.py), no measurement ------

def test_benchmark_layouts_account_for_the_load_generators_core() -> None:
    from benchmarks.workers import layouts
    two = layouts([0, 1], pin=True)
    assert [(l.workers, l.server_cpus, l.load_cpu, l.shared) for l in two] == [
        (1, (0,), 1, False), (2, (0,), 1, False), (2, (0, 1), 1, True)]
    assert layouts([0, 1, 2, 3], pin=True)[-1].shared is False  # wrk gets a core of its own
    assert all(l.server_cpus == () for l in layouts([0, 1], pin=False))


def test_benchmark_serves_the_uvloop_peer_on_two_workers() -> None:
    pytest.importorskip("uvloop")
    command = [sys.executable, "-m", "benchmarks.workers", "--serve", "uvloop-protocol", "--workers", "2",
               "--port", "0"]
    server = ServerProcess("uvloop-protocol", command=command, timeout=TIMEOUT).start()
    try:
        pids = worker_pids(server, 2)
        for _ in range(10):
            assert http_get(server.address) == (200, HELLO)
    finally:
        assert server.stop() == 0
    assert not any(alive(pid) for pid in pids)


def test_benchmark_table_is_generated_from_the_json() -> None:
    import json
    from pathlib import Path

    from benchmarks.workers import markdown
    root = Path(__file__).resolve().parent.parent
    data = json.loads((root / "benchmarks/results/workers.json").read_text(encoding="utf-8"))
    assert (root / "benchmarks/results/workers.md").read_text(encoding="utf-8") == markdown(data), \
        "re-render the table from the committed JSON: benchmarks.workers.markdown(json.load(...))"
    assert {(row["server"], row["workers"]) for row in data["rows"]} >= {("epoll", 1), ("epoll", 2)}


@pytest.mark.slow  # a whole small run of the benchmark: the slow step (CI) runs it
def test_benchmark_quick_run_writes_under_local_or_out_and_concludes(tmp_path) -> None:
    # A --quick run on one stage: its JSON and table go where --out says (by
    # default benchmarks/results/local/, never the committed folder), and it
    # ends on its one-line conclusion.
    import json
    import shutil
    from pathlib import Path

    if shutil.which("wrk") is None:
        pytest.skip("wrk is needed for a benchmark run")
    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "workers.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.workers", "--quick", "--servers", "epoll",
                           "--duration", "1", "--out", str(out)],  # wrk's -d takes whole seconds
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {(row["server"], row["workers"]) for row in data["rows"]} >= {("epoll", 1), ("epoll", 2)}
    assert all(row["status"] == "ok" for row in data["rows"]), [row["note"] for row in data["rows"]]
    assert out.with_suffix(".md").exists()
    assert done.stdout.strip().splitlines()[-1].startswith("2 workers on 2 cores")
    refused = subprocess.run([sys.executable, "-m", "benchmarks.workers", "--quick", "--out",
                              str(root / "benchmarks" / "results" / "workers.json")],
                             capture_output=True, text=True, timeout=60, cwd=root)
    assert refused.returncode == 2 and "only with --reference" in refused.stderr
