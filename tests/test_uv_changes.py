# tests/test_uv_changes.py
#
# benchmarks/uv_changes.py: the plumbing, never a speed.  Every step's
# server (HTTP and echo) starts, answers, and stops cleanly on SIGTERM; each
# step's loop is what its row says (Part III's transport on uv_poll, uv_tcp
# writing at once, uv_tcp batching); a tiny run writes a JSON with a row
# per load and step and a Markdown table naming each; and --profile sums
# the time by layer, with the C loop as a layer of its own.  Skipped, with
# the reason, where tinyloop.uv is not built.  Loopback only, small counts,
# every subprocess bounded in time.

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import uv_changes
from benchmarks.harness.machine import ROOT
from tinyloop.http import HELLO
from tinyloop.testing import ServerProcess, recv_response

SCRIPT = ("-m", "benchmarks.uv_changes")  # run from the repository root, as the README says

UV_MISSING = uv_changes.uv_missing()
pytestmark = pytest.mark.skipif(UV_MISSING is not None, reason=f"tinyloop.uv is not built: {UV_MISSING}")
needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")


# Seconds a test may add for building a variant extension (benchmarks/uv_variants.py):
# a minute alone, several behind other builds on a busy two-core machine.
BUILD_ALLOWANCE = 600


@pytest.fixture(scope="module")
def variant_builds() -> None:
    """The variant extensions, built once, before a server must start in seconds."""
    uv_changes.prepare_builds([step.key for step in uv_changes.STEPS])


@pytest.mark.slow  # the variant builds' set-up alone is ~25 s per worker: the slow step runs it
@pytest.mark.timeout(60 + BUILD_ALLOWANCE)
@pytest.mark.parametrize("key", [step.key for step in uv_changes.STEPS])
def test_every_step_serves_http_and_echo(key: str, variant_builds: None) -> None:
    with ServerProcess(key, command=list(uv_changes.server(key, "http").argv), timeout=10) as server:
        with server.connect() as sock:
            buffer = bytearray()
            for _ in range(2):
                sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
                assert recv_response(sock, buffer)[::2] == (200, HELLO)
            # Three pipelined requests in one write, the last asking to close: three answers.
            sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n" * 2
                         + b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            for _ in range(3):
                assert recv_response(sock, buffer)[::2] == (200, HELLO)
            assert sock.recv(100) == b""
    assert server.proc is not None and server.proc.returncode == 0, "".join(server.stderr_lines)
    with ServerProcess(key, command=list(uv_changes.server(key, "echo").argv), timeout=10) as server:
        with server.connect() as sock:
            message = bytes(range(256)) * 4  # 1 KiB, as the load sends
            sock.sendall(message)
            echoed = b""
            while len(echoed) < len(message):
                chunk = sock.recv(65536)
                assert chunk, f"the echo server closed after {len(echoed)} of {len(message)} bytes"
                echoed += chunk
            assert echoed == message
    assert server.proc is not None and server.proc.returncode == 0, "".join(server.stderr_lines)


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two connected TCP sockets on 127.0.0.1 (uv_tcp takes TCP only, not a Unix socketpair)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    return accepted, client


# Run in a step's own process, on the step's build: the transport's class, and
# whether a write() below the high-water mark waits for the end of the turn.
_STEP_PROGRAM = """
import asyncio, socket, sys
from benchmarks import uv_changes, uv_variants
step = uv_changes._STEPS[sys.argv[1]]
if step.build:
    uv_variants.use(step.build)
loop = step.factory()()
with socket.create_server(("127.0.0.1", 0)) as listener:
    theirs = socket.create_connection(listener.getsockname())
    ours, _ = listener.accept()
transport = loop._make_socket_transport(ours, asyncio.Protocol())
loop.run_until_complete(asyncio.sleep(0))  # connection_made
transport.write(b"x")
waiting = transport.get_write_buffer_size()
transport.abort()
loop.run_until_complete(asyncio.sleep(0))  # connection_lost runs
loop.close(); theirs.close()
print(type(transport).__name__, waiting)
"""


@pytest.mark.slow  # imports every step's build, ~35 s on 2 cores (the slow step runs it)
@pytest.mark.timeout(300 + BUILD_ALLOWANCE)
def test_each_step_is_the_loop_its_row_names() -> None:
    # A write of one byte waits for the end of the turn only where writes are batched.
    expected = {"aio": "_SelectorSocketTransport 0", "uv/poll-transports": "_SelectorSocketTransport 0",
                "uv/no-batching": "TCPTransport 0", "uv": "TCPTransport 1"}
    assert [step.key for step in uv_changes.STEPS] == list(expected)
    for step in uv_changes.STEPS:
        done = subprocess.run([sys.executable, "-c", _STEP_PROGRAM, step.key], cwd=ROOT,
                              capture_output=True, text=True, timeout=280 + BUILD_ALLOWANCE)
        assert done.returncode == 0, done.stderr[-1500:]
        assert done.stdout.strip() == expected[step.key], step.key


def test_the_committed_table_is_rendered_from_the_committed_json_alone() -> None:
    results = ROOT / "benchmarks" / "results"
    data = json.loads((results / "uv_changes.json").read_text(encoding="utf-8"))
    assert uv_changes.render(data) == (results / "uv_changes.md").read_text(encoding="utf-8")


def test_a_step_on_a_variant_build_refuses_the_installed_extension() -> None:
    with pytest.raises(RuntimeError, match="no-batching"):
        uv_changes._STEPS["uv/no-batching"].factory()


@pytest.mark.slow  # a whole tiny run, about a minute on 2 cores (scripts/test.sh's slow step)
@needs_wrk
@pytest.mark.timeout(240 + BUILD_ALLOWANCE)
def test_a_tiny_run_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "uv_changes.json"
    command = [sys.executable, *SCRIPT, "--quick", "--no-pin", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200 + BUILD_ALLOWANCE, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    keys = [step.key for step in uv_changes.STEPS]
    assert [(row["load"], row["step"]) for row in data["rows"]] == [
        (load, key) for load in uv_changes.LOAD_NAMES for key in keys]
    for row in data["rows"]:
        assert row["ok_runs"] == 1 and row["cpu_us"]["median"] > 0 and row["rate"]["median"] > 0, row
        assert (row["speedup_aio"] is None) == (row["step"] == "aio"), row
    for record in data["runs"]:
        assert record["status"] == "ok", record
    text = out.with_suffix(".md").read_text(encoding="utf-8")
    for key in keys:
        assert text.count(f"| `{key}` |") == len(uv_changes.LOAD_NAMES), key
    for name in uv_changes.LOAD_NAMES:
        assert f"**{uv_changes.LOAD_TITLES[name]}**" in text
    assert "benchmarks.uv_changes --quick" in text and "load average" in text


@needs_wrk
@pytest.mark.timeout(120)
def test_the_profile_shows_the_c_loop_as_a_layer(tmp_path: Path) -> None:
    out = tmp_path / "profile_uv.txt"
    command = [sys.executable, *SCRIPT, "--profile", "uv,aio", "--quick", "--no-pin", "--out", str(tmp_path / "x.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text(encoding="utf-8")
    uv, _, aio = text.partition("\naio (")
    assert uv.startswith("uv (") and "wrk -t1 -c 100 -d 1s" in uv and "calls per request: data_received" in uv
    assert uv_changes.C_LOOP in uv and "HTTP: tinyloop/http" in uv
    assert uv_changes.C_LOOP not in aio and "the loop: tinyloop/callbacks + tinyloop/aio" in aio


@pytest.mark.slow  # strace over each step's server, ~45 s on 2 cores (the slow step runs it)
@needs_wrk
@pytest.mark.timeout(120 + BUILD_ALLOWANCE)
def test_syscalls_counts_each_steps_reads_and_writes_per_request(tmp_path: Path, variant_builds: None) -> None:
    from benchmarks.harness import strace

    problem = strace.strace_problem()
    if problem:
        pytest.skip(problem)
    command = [sys.executable, *SCRIPT, "--syscalls", "uv/no-batching,uv", "--loads", "wrk,echo-10k", "--quick",
               "--no-pin"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {tuple(line.split()[:2]): line.split() for line in done.stdout.splitlines()
            if line.startswith(("uv/no-batching ", "uv "))}
    assert set(rows) == {(step, load) for step in ("uv/no-batching", "uv") for load in ("wrk", "echo-10k")}, \
        done.stdout
    for key, cells in rows.items():
        reads, writes = float(cells[3]), float(cells[4])
        # One request or message in flight per connection: one read and one write each, whichever step.
        assert 0.9 < reads < 1.2 and 0.9 < writes < 1.2, (key, cells)


def test_the_libuv_chapter_tells_the_step_tables_as_the_committed_run_shows_them() -> None:
    # libuv.md, below the step tables, says of the committed uv_changes.json: every step's range
    # overlaps that of the step above it on every load, and aio's overlaps uv's; uv costs less
    # than aio in every pipelined repetition and in all but one under wrk; pipelined, uv is
    # below uv/no-batching in every repetition and the two ranges overlap; uv/no-batching costs
    # more than uv/poll-transports at the median of every load.  A run that changes one fails
    # here until the sentence says what it shows (the plain-wrk batching row: tests/test_docs.py).
    data = json.loads((ROOT / "benchmarks" / "results" / "uv_changes.json").read_text(encoding="utf-8"))
    text = " ".join((ROOT / "chapters" / "libuv.md").read_text(encoding="utf-8").split())
    keys, loads = [step.key for step in uv_changes.STEPS], list(data["loads"])
    rows = {(r["load"], r["step"]): r["cpu_us"] for r in data["rows"]}
    runs = {(r["load"], r["rep"], r["step"]): r["cpu_us"] for r in data["runs"] if r["status"] == "ok"}

    def overlap(load: str, a: str, b: str) -> bool:
        return rows[(load, a)]["min"] <= rows[(load, b)]["max"] and rows[(load, b)]["min"] <= rows[(load, a)]["max"]

    def repetitions_not_below(load: str, low: str, high: str) -> int:
        reps = {rep for (name, rep, _) in runs if name == load}
        assert reps, load
        return sum(runs[(load, rep, low)] >= runs[(load, rep, high)] for rep in reps)

    assert "every step's range overlaps that of the step above it, on every load, and even `aio`'s overlaps `uv`'s" \
        in text
    for load in loads:
        assert all(overlap(load, a, b) for a, b in zip(keys, keys[1:])) and overlap(load, "aio", "uv"), load
    said = "`uv` costs less than `aio` in every repetition of the pipelined load and in all but one under `wrk`"
    assert said in text
    assert repetitions_not_below("wrk-pipeline", "uv", "aio") == 0 and repetitions_not_below("wrk", "uv", "aio") == 1
    assert "There too `uv` is below `uv/no-batching` in every repetition, and there too the two ranges overlap" in text
    assert repetitions_not_below("wrk-pipeline", "uv", "uv/no-batching") == 0
    assert overlap("wrk-pipeline", "uv", "uv/no-batching")
    assert "`uv/no-batching` costs more than `uv/poll-transports` too, at the median of every load" in text
    for load in loads:
        assert rows[(load, "uv/no-batching")]["median"] > rows[(load, "uv/poll-transports")]["median"], load
