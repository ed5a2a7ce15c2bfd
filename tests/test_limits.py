"""Every stage at its limits: out of descriptors, and many idle connections.

Each test runs on every stage in ``tinyloop.stages.STAGES`` (a stage added
to the registry is tested here without an edit), with a server process of
its own, because each sets a limit or fills the server up.

At the descriptor limit.  The server runs with a soft RLIMIT_NOFILE of
``LIMIT`` (set in the child by ``ServerProcess(nofile=...)``), and twice as
many clients connect as it can hold.  While it is full, over two seconds of
wall time, it must use little CPU (read from /proc/PID/stat: a level-
triggered listener it cannot drain makes a naive loop spin), stay alive, go
on answering a keep-alive client it accepted before, and log the episode
once, not per retry.  After the crowd leaves, a new client must be served
within a few seconds (edge-triggered epoll gets no new edge for connections
it left queued), and the server's descriptors must be back where they were.

Many idle connections.  A busy keep-alive client makes its requests with
none and then with IDLE idle connections held open; the server's CPU per
request must not grow much, on every stage whose wait is O(ready).  select
refuses past FD_SETSIZE instead (tests/test_select_fd_setsize.py), poll's
O(n) scan is the lesson of the idle benchmark, and the Part 0 servers would
need a thread (or a turn) per connection.

Last, benchmarks/limits.py (the readiness chapter's table) is run once on
one stage, to check that its JSON holds what its table shows.

All traffic is on loopback; every socket has a timeout; nothing runs
longer than a few seconds per stage.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tinyloop import stages
from tinyloop.http import HELLO
from tinyloop.testing import ServerProcess, http_get, nofile_at_least, recv_response

from conftest import ONE_PER_PART, stage_params  # tests/ is on sys.path under pytest
from test_select_fd_setsize import wait_until

ROOT = Path(__file__).resolve().parent.parent
STAGE_NAMES = [stage.name for stage in stages.STAGES]
TIMEOUT = 5.0          # seconds any one socket operation may take
LIMIT = 64             # the server's RLIMIT_NOFILE in the descriptor-limit test
CROWD = 2 * LIMIT      # clients that connect at once: more than it can hold
WINDOW = 2.0           # seconds of wall time over which CPU is measured
MAX_CPU_SHARE = 0.10   # of one core, while over the limit
RECOVERY = 5.0         # seconds within which a new client must be served again
IDLE = 5000            # idle connections beside the busy client
REQUESTS = 5000        # the busy client's requests per measurement (CPU time comes in 10 ms ticks)
RUNS = 3               # measurements per condition; the least is kept (noise only ever adds)
# How much more CPU per request IDLE idle connections may cost.  A wait that
# scans every descriptor costs 40 to 100 times more at 5,000 (poll, measured);
# an O(ready) one the same, give or take a shared machine's noise.
MAX_IDLE_RATIO = 3.0
# Stages the idle test leaves out, and why (every other stage is tested).
NOT_O_READY = {
    "blocking": "serves one connection at a time",
    "threaded": "would start a thread per idle connection",
    "select": "refuses descriptors past FD_SETSIZE: tests/test_select_fd_setsize.py",
    "poll": "scans every descriptor per wait: the idle benchmark's lesson",
}
GET = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


def ask(sock: socket.socket, buffer: bytearray) -> tuple[int, bytes]:
    sock.sendall(GET)
    status, _, body = recv_response(sock, buffer)
    return status, body


def cpu_share(server: ServerProcess, seconds: float) -> float:
    """The server's CPU time over the next ``seconds`` of wall time, as a share of one core."""
    before, started = server.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (server.cpu_seconds() - before) / (time.monotonic() - started)


# Seconds per stage: one stage per Part here, every stage in the slow step.
@pytest.mark.parametrize("stage", stage_params(STAGE_NAMES, default=ONE_PER_PART))
def test_at_the_descriptor_limit_no_spin_no_death_and_recovery(stage: str) -> None:
    with ServerProcess(stage, nofile=LIMIT) as server:
        # A keep-alive client, accepted while there is room.
        keeper, buffer = server.connect(TIMEOUT), bytearray()
        crowd: list[socket.socket] = []
        try:
            assert ask(keeper, buffer) == (200, HELLO)
            baseline = server.fd_count() - 1  # without the keeper
            crowd = [server.connect(TIMEOUT) for _ in range(CROWD)]
            full = wait_until(lambda: server.fd_count() >= LIMIT - 1, TIMEOUT)
            if stage != "blocking":  # it serves the keeper and accepts nobody else: its lesson
                assert full, f"the server holds {server.fd_count()} descriptors, never reached {LIMIT}"
            time.sleep(0.2)  # let the first failed accept and its log line happen
            logged = len(server.stderr_lines)

            share = cpu_share(server, WINDOW)
            assert server.proc.poll() is None, (
                "the server died at the descriptor limit:\n" + "".join(server.stderr_lines[-10:]))
            assert share < MAX_CPU_SHARE, (
                f"while over the descriptor limit the server must stop accepting; yours used "
                f"{share:.0%} CPU for {WINDOW:g} s (a listener it cannot drain stays readable:"
                f" leave it out of the wait until a rest is over)")
            assert ask(keeper, buffer) == (200, HELLO), "a connected client was not answered"
            extra = server.stderr_lines[logged:]
            assert len(extra) <= 1, f"log once per episode, not per retry; {len(extra)} lines: {extra[:3]}"
        finally:
            for sock in crowd:
                sock.close()
            keeper.close()

        # Descriptors free up: a new client is served within RECOVERY seconds.
        started = time.monotonic()
        assert http_get(server.address, timeout=RECOVERY) == (200, HELLO), "a new client was not served"
        assert time.monotonic() - started < RECOVERY
        assert wait_until(lambda: server.fd_count() <= baseline, 3.0), (
            f"descriptors leaked: {server.fd_count()} open after all clients left, {baseline} before")
        assert server.proc.poll() is None


@pytest.fixture
def descriptors_for_idle() -> Iterator[None]:
    """Room in this process (and the server, which inherits it) for IDLE connections."""
    with nofile_at_least(IDLE + 500) as enough:
        if not enough:
            pytest.skip(f"RLIMIT_NOFILE's hard limit is below {IDLE + 500}")
        yield


def cpu_per_request(server: ServerProcess, sock: socket.socket, buffer: bytearray,
                    requests: int = REQUESTS) -> float:
    """Seconds of server CPU per request, over ``requests`` keep-alive requests on ``sock``."""
    before = server.cpu_seconds()
    for _ in range(requests):
        assert ask(sock, buffer) == (200, HELLO)
    return (server.cpu_seconds() - before) / requests


@pytest.mark.alone  # compares CPU per request: another test beside it would move the ratio
@pytest.mark.parametrize("stage", stage_params([name for name in STAGE_NAMES if name not in NOT_O_READY],
                                               default=ONE_PER_PART))
def test_idle_connections_do_not_slow_a_busy_client(stage: str, descriptors_for_idle: None) -> None:
    idle: list[socket.socket] = []
    with ServerProcess(stage) as server, server.connect(TIMEOUT) as busy:
        try:
            buffer = bytearray()
            cpu_per_request(server, busy, buffer, 1000)  # warm up
            faults = server.minor_faults()
            alone = min(cpu_per_request(server, busy, buffer) for _ in range(RUNS))
            faults_alone = (server.minor_faults() - faults) / (RUNS * REQUESTS)
            before = server.fd_count()
            idle = [server.connect(TIMEOUT) for _ in range(IDLE)]
            assert wait_until(lambda: server.fd_count() >= before + IDLE, 10.0), (
                f"the server holds {server.fd_count() - before} of {IDLE} idle connections")
            faults = server.minor_faults()
            crowded = min(cpu_per_request(server, busy, buffer) for _ in range(RUNS))
            faults_crowded = (server.minor_faults() - faults) / (RUNS * REQUESTS)
            assert server.fd_count() >= before + IDLE, "idle connections were dropped during the test"
        finally:
            for sock in idle:
                sock.close()
    slack = 2 * 0.01 / REQUESTS  # two clock ticks
    # Page faults tell a scan apart from memory trouble: aio once paid two a
    # request here, and 3.5 times the CPU, from a 256 KiB allocation per
    # read that only the crowded heap sent to fresh pages (tests/test_aio_reads.py).
    assert crowded <= MAX_IDLE_RATIO * alone + slack, (
        f"{IDLE} idle connections made each request cost {crowded * 1e6:.0f} us of server CPU,"
        f" against {alone * 1e6:.0f} us with none, and {faults_crowded:.2f} minor page faults a"
        f" request against {faults_alone:.2f}: the wait is not O(ready), or (with more faults)"
        f" each request allocates memory the kernel must back anew")


@pytest.mark.slow  # a whole small run of the benchmark: the slow step (CI) runs it
def test_the_limits_benchmark_measures_both_trees_and_renders_its_json(tmp_path: Path) -> None:
    # benchmarks/limits.py on one stage, with this checkout standing in for
    # the "before" tree: every figure the table shows is in the JSON.
    out = tmp_path / "limits.json", tmp_path / "limits.txt"  # the table goes beside the JSON
    command = [sys.executable, "-m", "benchmarks.limits", "--stages", "epoll",
               "--before", str(ROOT), "--window", "0.5", "--asks", "3", "--out", str(out[0])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out[0].read_text(encoding="utf-8"))
    assert [row["stage"] for row in data["rows"]] == ["epoll"]
    for tree in ("before", "after"):
        record = data["rows"][0][tree]
        assert record["status"] == "ok" and record["alive"], record
        assert record["cpu"] >= 0 and record["keeper_ms"] > 0 and record["new_client_s"] is not None, record
    table = out[1].read_text(encoding="utf-8")
    assert "before: CPU" in table and "after: CPU" in table and "  epoll " in table
