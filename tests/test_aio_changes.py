# tests/test_aio_changes.py
#
# benchmarks/aio_changes.py: the plumbing, never a speed.  Every server it
# runs (the real loop and each variant that undoes one change) starts and
# answers keep-alive and closing requests correctly, and stops cleanly on
# SIGTERM; a tiny run writes a JSON with a row per change and a text table
# naming each; the per-operation variants really are what they say (a tuple
# per handle, the check on every call); and --profile sums the time by
# layer.  Loopback only, small counts, every subprocess bounded in time.
# One test reads no clock of its own: it holds chapters/asyncio.md's
# sentences about the committed run to what that run's files show.

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


def test_the_chapter_reads_the_committed_run_as_it_is() -> None:
    # chapters/asyncio.md's "What it costs" argues from the committed aio_changes.json (which rows
    # are starred, which tests/test_docs.py holds), latest.json's wrk rows and echo.json's spreads;
    # each sentence quoted below must still say what those files show.
    results = ROOT / "benchmarks" / "results"
    text = " ".join((ROOT / "chapters" / "asyncio.md").read_text(encoding="utf-8").split())
    data = json.loads((results / "aio_changes.json").read_text(encoding="utf-8"))
    rows = {row["key"]: row for row in data["rows"]}
    micro = {row["key"]: row for row in data["micro"]}
    ratio = {key: row["ratio"] for key, row in rows.items()}

    assert "For the big ideas the medians favour the design" in text
    for key in ("transport", "transport-same-loop", "write-now"):
        assert ratio[key] > 1, f"{key}: the variant's median is no longer above the real loop's"

    # loop-buffer: "asyncio's read costs {faults} page faults a request ... against {faults}";
    # left free, "the variant takes {faults} faults a request": dear or cheap by history.
    assert "The `loop-buffer` rows price asyncio's read" in text
    held, free = rows["loop-buffer"], rows["loop-buffer/free"]
    assert held["without"]["faults_per_req"] >= 1.5, "with the threshold held, asyncio's read faults no more"
    assert held["with"]["faults_per_req"] < 0.1 and free["with"]["faults_per_req"] < 0.1
    assert free["without"]["faults_per_req"] < 0.1, "with the threshold free, the variant faults now"
    assert "the CPU of the real loop at the median" in text and held["ratio"] > 1

    # "every row is starred. The medians fall from {selectors} to {debug-checks} times the real loop's"
    small = ("no-task-accept", "peername", "debug-checks", "init-fields", "no-tuple", "selectors")
    assert "`selectors`), every row is starred" in text
    assert all(rows[key]["overlap"] for key in small), [key for key in small if not rows[key]["overlap"]]
    assert "rows/[key=selectors]/ratio" in text and "rows/[key=debug-checks]/ratio" in text
    assert min(small, key=ratio.get) == "selectors" and max(small, key=ratio.get) == "debug-checks"

    # Per operation, every row starred; debug-checks above the real loop's median, its fastest
    # run inside that range; no-tuple/1000's variant collecting twice as often.
    assert "on this machine they are starred too" in text
    assert all(row["overlap"] for row in micro.values()), [k for k, row in micro.items() if not row["overlap"]]
    checks = micro["debug-checks"]
    assert "has a median well above the real loop's" in text and checks["ratio"] > 1.25
    assert checks["with"]["min"] <= checks["without"]["min"] <= checks["with"]["max"]
    assert "micro/[key=init-fields]/ratio" in text and "micro/[key=no-tuple]/ratio" in text
    collections = micro["no-tuple/1000"]["without"]["collections_per_10k_ops"]
    assert "twice as often" in text
    assert 1.75 <= collections / micro["no-tuple/1000"]["with"]["collections_per_10k_ops"] <= 2.25

    # The wrk table: transports clear of the noise there (coroutines against aio-streams); aio
    # and asyncio-protocol overlapping, uvloop overlapping both; aio's span wider than its
    # median's distance from asyncio's or uvloop's.
    wrk = json.loads((results / "latest.json").read_text(encoding="utf-8"))["results"]["wrk"]
    cpu = {name: wrk[name]["cpu_us_per_req"] for name in wrk}
    spread = {name: wrk[name]["spread"]["cpu_us_per_req"] for name in wrk}
    assert "under wrk, is where transports stand clear of the noise" in text
    assert spread["aio-streams"][1] < spread["coroutines"][0], "wrk: coroutines and aio-streams overlap now"

    def overlap(a: str, b: str) -> bool:
        return spread[a][0] <= spread[b][1] and spread[b][0] <= spread[a][1]

    assert "with ranges that overlap" in text and overlap("aio", "asyncio-protocol")
    assert "a range that overlaps both" in text
    assert overlap("uvloop-protocol", "aio") and overlap("uvloop-protocol", "asyncio-protocol")
    assert "a wider span than the difference between its median and asyncio's or uvloop's" in text
    assert spread["aio"][1] - spread["aio"][0] > max(abs(cpu["aio"] - cpu[name])
                                                     for name in ("asyncio-protocol", "uvloop-protocol"))

    # The echo tables (the medians' order is tests/test_docs.py's): at 1 KiB uvloop's range below
    # aio-protocol's but overlapping asyncio's, uv's overlapping both; at 100 KiB the four Protocol
    # rows within a fifth of the C floor's, and each loop's streams row above its Protocol row with
    # ranges apart, more than twice it on asyncio, uvloop, aio and uv.
    echo = json.loads((results / "echo.json").read_text(encoding="utf-8"))["results"]
    low = {name: row["spread"]["cpu_us_per_msg"] for name, row in echo["1024"].items()}
    assert "all cost less than every one of `aio-protocol`'s" in text
    assert low["uvloop-protocol"][1] < low["aio-protocol"][0], "1 KiB: uvloop and aio overlap now"
    for a, b in (("uvloop-protocol", "asyncio-protocol"), ("uv-protocol", "asyncio-protocol"),
                 ("uv-protocol", "aio-protocol")):
        assert low[a][0] <= low[b][1] and low[b][0] <= low[a][1], f"1 KiB: {a} and {b} are apart now"
    big = echo["102400"]
    four = {name: big[f"{name}-protocol"]["cpu_us_per_msg"] for name in ("asyncio", "uvloop", "aio", "uv")}
    assert "within a fifth of the C floor's" in text
    assert all(cost <= 1.2 * big["c-epoll"]["cpu_us_per_msg"] for cost in four.values()), four
    assert "each loop's streams row costs more than its Protocol row, with ranges apart" in text
    for name in {key.rsplit("-", 1)[0] for key in big if key.endswith("-streams")}:
        streams, protocol = big[f"{name}-streams"], big[f"{name}-protocol"]
        assert streams["spread"]["cpu_us_per_msg"][0] > protocol["spread"]["cpu_us_per_msg"][1], name
    assert all(big[f"{name}-streams"]["cpu_us_per_msg"] > 2 * four[name] for name in four)
