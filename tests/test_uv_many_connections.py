# tests/test_uv_many_connections.py
#
# Part IV's promise at scale: 10,000 concurrent keep-alive connections held
# and served by the ``uv`` stage.  The test opens them all from one thread
# (tinyloop.testing.Crowd: non-blocking sockets and selectors), sends one
# request on each and reads every answer, keeps them all open, and does it
# again: the second round can only be answered by a server that held every
# connection.
#
# Rules this file keeps:
#   * The descriptor limit is raised in the test, for this process (the
#     client end of every connection) and for the server (its end, set in
#     the child by ServerProcess(nofile=...)), and put back after.  Each
#     process's limit is its own (setrlimit(2)), so each needs one end of
#     every connection and some room (NOFILE), not both ends.  The soft
#     limit is raised up to the hard one; a process allowed to (root, or
#     CAP_SYS_RESOURCE: setrlimit(2)) raises the hard limit too.  Where
#     neither reaches NOFILE the test is skipped, saying so.
#   * Every wait is bounded (Crowd's timeout); 127.0.0.1 only.
#   * The memory each connection costs is the benchmark's question
#     (benchmarks/memory.py), not this test's: it checks behaviour only.

from __future__ import annotations

import resource
import sys
from collections.abc import Iterator

import pytest

from tinyloop import stages
from tinyloop.http import HELLO
from tinyloop.testing import Crowd, ServerProcess

CONNECTIONS = 10_000
NOFILE = CONNECTIONS + 1024   # descriptors per process: one end of every connection, and room
TIMEOUT = 60.0         # seconds for each step (open, a round of requests)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/fd"),
    pytest.mark.skipif((why := stages.get("uv").unavailable()) is not None, reason=f"uv: {why}"),
]


@pytest.fixture
def nofile() -> Iterator[None]:
    """This process's RLIMIT_NOFILE raised to NOFILE for the test (skips if it cannot be)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < NOFILE:
        try:
            new_hard = hard if hard == resource.RLIM_INFINITY or hard >= NOFILE else NOFILE
            resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, new_hard))
        except (ValueError, OSError) as error:
            pytest.skip(f"needs {NOFILE} descriptors per process; the hard limit is {hard} "
                        f"and cannot be raised here ({error}): ulimit -Hn {NOFILE} as root")
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.timeout(4 * TIMEOUT)
def test_uv_holds_and_serves_10000_keep_alive_connections(nofile: None) -> None:
    with ServerProcess("uv", nofile=NOFILE) as server, Crowd(server.address, timeout=TIMEOUT) as crowd:
        crowd.open(CONNECTIONS)
        assert len(crowd) == CONNECTIONS
        first = crowd.ask()
        assert first == [(200, HELLO)] * CONNECTIONS, _first_wrong(first)
        # Every connection is still open at both ends: the server holds a
        # descriptor for each (and a few of its own).
        assert server.fd_count() >= CONNECTIONS
        second = crowd.ask()
        assert second == [(200, HELLO)] * CONNECTIONS, _first_wrong(second)
        assert server.proc is not None and server.proc.poll() is None, "".join(server.stderr_lines)


def _first_wrong(answers: list[tuple[int, bytes]]) -> str:
    bad = [(i, answer) for i, answer in enumerate(answers) if answer != (200, HELLO)]
    return f"{len(bad)} wrong answers, the first: {bad[:3]}"
