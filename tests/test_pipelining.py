"""Pipelining all the way down: 24 requests in one write, their answers in one send.

Japronto's lesson (chapters/realworld/pipelining.md): when one read brings
several pipelined requests, answer them with one write.  tinyloop's HTTP
layer already returns one string for one read's requests
(``HTTPConnection.receive_data``); these tests check that every stage in
``tinyloop.stages.STAGES`` keeps that string whole on its way to the kernel.

For each stage, one server process (``python -m tinyloop serve STAGE``,
as tests/test_servers.py starts them) gets 24 pipelined requests in a
single ``sendall``, and

  * all 24 answers arrive, in the order of the requests (RFC 9112 section
    9.3: a server answers pipelined requests in the order received);
  * on Linux, with ``strace`` able to attach, the server wrote those 24
    answers with at most MAX_SENDS send calls (one is what every stage does
    today).  Without strace the test is skipped and says why.

Every socket operation has a timeout and strace is always detached, so a
stage that hangs fails its test instead of hanging the suite.

The last tests check the harness's side of the experiment on a tiny run:
the ``wrk-pipeline`` load's command, the reading of strace's summary, and
one ``benchmarks/syscalls.py`` run on one stage at both depths (a few
seconds, 127.0.0.1 only).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import loads, servers, syscalls
from benchmarks.harness.strace import Strace, parse_strace_summary, strace_problem
from tinyloop import stages
from tinyloop.testing import ServerProcess, recv_response

from conftest import stage_params  # tests/ is on sys.path under pytest

STAGE_NAMES = [stage.name for stage in stages.STAGES]
DEPTH = 24       # Japronto's depth, and the wrk-pipeline load's
TIMEOUT = 5.0    # seconds any one socket operation may take
# Send calls allowed for one read's answers.  One is the goal and what every
# stage does; two leaves room for a server whose read happened to catch the
# batch in two pieces, which loopback does not do for 2 KB sent at once.
MAX_SENDS = 2

# The system calls that write to a socket (x86-64 and arm64 names; send(2)
# itself is sendto(2) in the kernel).  A line of ``strace -f`` output:
#   4242  sendto(7, "HTTP/1.1 200 OK\r"..., 2712, 0, NULL, 0) = 2712
_SEND = re.compile(r"^\d+\s+(write|writev|sendto|sendmsg|sendmmsg)\((\d+),(.*)$")


def batch() -> tuple[bytes, list[bytes]]:
    """DEPTH pipelined POST /echo requests and the bodies their answers must carry, in order."""
    bodies = [b"answer %02d" % i for i in range(DEPTH)]
    requests = b"".join(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                        for body in bodies)
    return requests, bodies


@pytest.fixture(scope="module", params=stage_params(STAGE_NAMES))
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    # A stage whose module cannot be imported here (Part IV's extension is
    # built only where libuv is) is skipped with the harness's own note.
    note = servers.prepare(servers.stage_server(stages.get(request.param)))
    if note:
        pytest.skip(f"{request.param}: {note}")
    with ServerProcess(request.param) as proc:
        yield proc


@pytest.fixture(scope="module")
def strace_ok() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("counting a server's send calls uses strace, which is Linux-only")
    problem = strace_problem()
    if problem:
        pytest.skip(f"cannot count the server's send calls: {problem}")


def exchange(server: ServerProcess) -> list[tuple[int, bytes]]:
    """Send the batch in one write on a new connection; return the DEPTH answers' (status, body)."""
    requests, _ = batch()
    with server.connect(TIMEOUT) as sock:
        sock.sendall(requests)
        buffer = bytearray()
        return [(status, body) for status, _, body in (recv_response(sock, buffer) for _ in range(DEPTH))]


@pytest.mark.timeout(60)
def test_24_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    _, bodies = batch()
    answers = exchange(server)
    assert answers == [(200, body) for body in bodies], (
        f"{server.stage}: {DEPTH} requests pipelined in one write must get {DEPTH} answers in "
        f"request order; got {answers}")


@pytest.mark.timeout(60)
def test_one_reads_answers_leave_in_one_send(server: ServerProcess, strace_ok: None,
                                             tmp_path: Path) -> None:
    if stages.get(server.stage).chapter == "completion":
        pytest.skip(f"{server.stage}: its sends are io_uring operations (SQEs), not system calls strace "
                    "can see; tests/test_uring.py and tests/test_ring_loop.py check them on a scripted ring")
    exchange(server)  # a first exchange, untraced: whatever a server does once is done
    log = tmp_path / "sends.strace"
    _, bodies = batch()
    # -s 16 keeps each logged buffer short: enough to see "HTTP/1.1 200 OK".
    with Strace(server.pid, ["-e", "trace=write,writev,sendto,sendmsg,sendmmsg", "-s", "16"], log):
        answers = exchange(server)
    assert answers == [(200, body) for body in bodies]
    sends = [match.groups() for match in map(_SEND.match, log.read_text().splitlines()) if match]
    # The connection's descriptor is the one our answers went out on.
    answer_fds = {fd for _, fd, rest in sends if '"HTTP/1.1 ' in rest}
    assert answer_fds, f"{server.stage}: strace saw no send carrying an answer: {sends}"
    on_connection = [(call, fd) for call, fd, _ in sends if fd in answer_fds]
    assert len(on_connection) <= MAX_SENDS, (
        f"{server.stage}: the answers to {DEPTH} requests that arrived in one read must leave in "
        f"one send (at most {MAX_SENDS}); the server made {len(on_connection)}: {on_connection}")


# --- the harness's pipelined load and system-call counter (plumbing, not speed) ---

_STRACE_C = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 52.10    0.004000           4      1000           sendto
 40.00    0.003000           3      1042        42 recvfrom
  7.90    0.000600          15        40           epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.007600           3      2082        42 total
"""


def test_the_pipelined_load_runs_wrk_with_the_script_and_its_depth() -> None:
    load = loads.get("wrk-pipeline")
    assert (load.tool, load.concurrency, load.pipeline) == ("wrk", 100, DEPTH)
    argv = loads.command(load, "http://127.0.0.1:1/", loads.Settings({}, 2.0, 3.0, 10.0))
    assert argv == ["wrk", "-t1", "-c", "100", "-d", "2s", "--timeout", "3s", "--latency",
                    "-s", str(loads.PIPELINE_SCRIPT), "http://127.0.0.1:1/", "--", "24"]
    assert loads.PIPELINE_SCRIPT.exists()
    assert not load.default, "wrk-pipeline runs when --loads names it; the default run keeps its three loads"


def test_strace_summary_is_read_by_name_and_grouped_per_request() -> None:
    calls = parse_strace_summary(_STRACE_C)
    assert calls == {"sendto": 1000, "recvfrom": 1042, "epoll_wait": 40}
    figures = syscalls.per_request(calls, 1000)
    assert figures["write"] == 1.0 and figures["read"] == 1.042 and figures["wait"] == 0.04
    assert figures["other"] == 0 and figures["total"] == 2.082


@pytest.mark.timeout(90)
def test_syscalls_cli_counts_one_stage_at_both_depths(strace_ok: None) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed")
    # As a new user types it: --quick, no --out; the committed results stay as they were.
    root = Path(__file__).resolve().parent.parent
    committed = ["git", "status", "--porcelain", "--", "benchmarks/results"]
    before = subprocess.run(committed, cwd=root, capture_output=True, text=True).stdout
    done = subprocess.run([sys.executable, "-m", "benchmarks.syscalls", "--stages", "epoll", "--peers", "none",
                           "--quick"], capture_output=True, text=True, timeout=80, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert subprocess.run(committed, cwd=root, capture_output=True, text=True).stdout == before
    assert done.stdout.rstrip().splitlines()[-1].startswith("system calls per request, depth 1: epoll")
    out = root / "benchmarks" / "results" / "local" / "syscalls.json"
    data = json.loads(out.read_text())
    assert [(p["server"], p["depth"], p["status"]) for p in data["points"]] == [("epoll", 1, "ok"), ("epoll", 24, "ok")]
    shallow, deep = data["points"]
    # One read and one write per request at depth 1; per batch of 24 at depth 24.
    assert 0.9 < shallow["per_request"]["write"] < 1.2, shallow
    assert deep["per_request"]["write"] < 0.2, deep
    table = out.with_suffix(".md").read_text()
    assert table.startswith("| server | depth |") and "| epoll | 24 |" in table
