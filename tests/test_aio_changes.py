# tests/test_aio_changes.py
#
# benchmarks/aio_changes.py: the plumbing, never a speed.  Every server it
# runs (the real loop and each variant that undoes one change) starts and
# answers keep-alive and closing requests correctly, and stops cleanly on
# SIGTERM; a tiny run writes a JSON with a row per change and a text table
# naming each; the per-operation variants really are what they say (a tuple
# per handle, the check on every call); and --profile sums the time by
# layer.  Loopback only, small counts, every subprocess bounded in time.

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import aio_changes
from benchmarks.harness.machine import ROOT
from tinyloop.http import HELLO
from tinyloop.testing import ServerProcess, recv_response

SCRIPT = [sys.executable, "-m", "benchmarks.aio_changes"]
needs_ab = pytest.mark.skipif(shutil.which("ab") is None, reason="ApacheBench (ab) is not installed")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(aio_changes.RECIPES))
def test_every_server_answers_keep_alive_and_close(name: str) -> None:
    with ServerProcess(name, command=list(aio_changes.server(name).argv), timeout=10) as server:
        with server.connect() as sock:
            buffer = bytearray()
            for _ in range(3):
                sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
                status, _, body = recv_response(sock, buffer)
                assert (status, body) == (200, HELLO)
            # Two pipelined requests, the second asking to close.
            sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"
                         b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            for _ in range(2):
                status, _, body = recv_response(sock, buffer)
                assert (status, body) == (200, HELLO)
            assert sock.recv(100) == b""  # and the server closed
        with server.connect() as sock:  # a malformed request gets its 400, the server goes on
            sock.sendall(b"NOT HTTP\r\n\r\n")
            assert recv_response(sock)[0] == 400
    assert server.proc is not None and server.proc.returncode == 0, "".join(server.stderr_lines)


def test_every_change_names_servers_and_loads_that_exist() -> None:
    for change in aio_changes.CHANGES:
        assert change.load in aio_changes.LOADS
        for name in (change.real, change.undone):
            assert name.startswith("stage:") or name in aio_changes.RECIPES, name
    assert len({c.key for c in aio_changes.CHANGES}) == len(aio_changes.CHANGES)
    assert len({m.key for m in aio_changes.MICRO}) == len(aio_changes.MICRO)


def test_the_handle_variants_are_what_they_say() -> None:
    loop = aio_changes.TupleHandleLoop()
    try:
        handle = loop.call_soon(print, "x")
        assert handle._args == (print, "x") and handle._callback == handle._context.run
        assert isinstance(handle, aio_changes.events.Handle)
    finally:
        loop.close()
    for loop_class in (aio_changes.SuperInitLoop, aio_changes.FirstDesignLoop, aio_changes.Loop):
        loop = loop_class()
        try:
            seen = []
            loop.call_soon(seen.append, 1)
            loop.run_once()
            assert seen == [1]
        finally:
            loop.close()
    checked = aio_changes.CheckedCallSoonLoop()
    plain = aio_changes.Loop()
    try:
        with pytest.raises(TypeError):
            checked.call_soon("not callable")  # checked on every call, debug or not
        plain.call_soon("not callable")  # the real loop checks in debug mode only
    finally:
        checked.close()
        plain.close()


def test_the_lean_selector_selects_what_selectors_does() -> None:
    a, b = socket.socketpair()
    lean, stock = aio_changes.LeanEpollSelector(), aio_changes.selectors.EpollSelector()
    try:
        for selector in (lean, stock):
            selector.register(a, aio_changes.selectors.EVENT_READ | aio_changes.selectors.EVENT_WRITE, "data")
        assert [(k.fileobj, m) for k, m in lean.select(0)] == [(k.fileobj, m) for k, m in stock.select(0)]
        b.send(b"x")
        assert [(k.data, m) for k, m in lean.select(0)] == [(k.data, m) for k, m in stock.select(0)]
    finally:
        lean.close()
        stock.close()
        a.close()
        b.close()


def _committed_results() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", "benchmarks/results"], cwd=ROOT,
                          capture_output=True, text=True).stdout


@pytest.mark.slow  # a quick run of every variant, about a minute (scripts/test.sh's slow step)
@needs_ab
@pytest.mark.timeout(240)
def test_a_quick_run_writes_every_row_under_local_only() -> None:
    # As a new user types it: --quick, no --out; the committed results stay as they were.
    before = _committed_results()
    done = subprocess.run([*SCRIPT, "--quick", "--requests", "50", "--no-pin"], capture_output=True, text=True,
                          timeout=200, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _committed_results() == before
    assert done.stdout.rstrip().splitlines()[-1].startswith("aio_changes: ")
    out = ROOT / "benchmarks" / "results" / "local" / "aio_changes.json"
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [row["key"] for row in data["rows"]] == [c.key for c in aio_changes.CHANGES]
    assert [row["key"] for row in data["micro"]] == [m.key for m in aio_changes.MICRO]
    for row in data["rows"]:
        for side in ("with", "without"):
            assert row[side]["ok_runs"] == 1 and row[side]["median"] > 0, row
    for record in data["runs"]:
        assert record["status"] == "ok" and record["completed"] == 50 and record["failed"] == 0, record
    for row in data["micro"]:
        assert row["with"]["median"] > 0 and row["without"]["median_gc_off"] > 0, row
    text = out.with_suffix(".txt").read_text(encoding="utf-8")
    for key in [c.key for c in aio_changes.CHANGES] + [m.key for m in aio_changes.MICRO]:
        assert f"\n{key} " in text
    assert "load average" in text and "python -m benchmarks.aio_changes --quick" in text


@needs_ab
@pytest.mark.timeout(120)
def test_the_profile_sums_time_by_layer(tmp_path: Path) -> None:
    command = [*SCRIPT, "--profile", "aio", "--requests", "50", "--no-pin", "--out", str(tmp_path / "x.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "profile_aio.txt").read_text(encoding="utf-8")
    assert text.startswith("aio (") and "ab -k -n 50 -c 10" in text and "calls per request: call_soon" in text
    for layer in ("HTTP: tinyloop/http", "the loop: tinyloop/callbacks + tinyloop/aio",
                  "kernel calls: socket methods, epoll"):
        assert layer in text


def test_the_committed_table_is_rendered_from_the_committed_json_alone() -> None:
    results = ROOT / "benchmarks" / "results"
    data = json.loads((results / "aio_changes.json").read_text(encoding="utf-8"))
    assert aio_changes.render(data) == (results / "aio_changes.txt").read_text(encoding="utf-8")


def test_the_nagle_variant_leaves_nodelay_off_and_the_loop_turns_it_on() -> None:
    for loop_class, expected in ((aio_changes.NagleLoop, 0), (aio_changes.Loop, 1)):
        loop = loop_class()
        with socket.create_server(("127.0.0.1", 0)) as listener:
            theirs = socket.create_connection(listener.getsockname())
            ours, _ = listener.accept()
        try:
            transport = loop._make_socket_transport(ours, aio_changes.asyncio.Protocol())
            assert bool(ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)) == bool(expected)
            transport.abort()
            loop.run_until_complete(aio_changes.asyncio.sleep(0))
        finally:
            loop.close()
            theirs.close()
