"""benchmarks/completion.py's SQPOLL rows: the decision rule, and a quick run that has the rows.

The rule the completion chapter states (SQPOLL is used only if it lowers the
server's CPU per request at every depth) is checked on made-up points; the
quick run (slow: about 30 s) checks that the rows are measured, that the
process's CPU clock counts the SQ poll thread (the threads' own times add up
to it), and that the thread ran where the server was pinned.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import completion, servers

ROOT = Path(__file__).resolve().parents[1]


def _points(plain: dict[int, float], polled: dict[int, float]) -> list[dict]:
    return ([{"server": "c-uring", "depth": d, "status": "ok", "cpu_us_per_request": v} for d, v in plain.items()]
            + [{"server": "c-uring-sqpoll", "depth": d, "status": "ok", "cpu_us_per_request": v}
               for d, v in polled.items()])


def test_sqpoll_is_used_only_if_it_lowers_cpu_per_request_at_every_depth() -> None:
    cheaper = completion.sqpoll_decision(_points({1: 5.0, 24: 1.0}, {1: 4.0, 24: 0.9}))
    assert (cheaper["uses"], cheaper["decision"], cheaper["cpu_ratio"]) == (True, "uses SQPOLL", {"1": 0.8, "24": 0.9})
    mixed = completion.sqpoll_decision(_points({1: 5.0, 24: 1.0}, {1: 4.0, 24: 1.2}))
    assert (mixed["uses"], mixed["decision"]) == (False, "does not use SQPOLL")
    equal = completion.sqpoll_decision(_points({1: 5.0, 24: 1.0}, {1: 5.0, 24: 1.0}))
    assert equal["uses"] is False
    missing = completion.sqpoll_decision(_points({1: 5.0, 24: 1.0}, {1: 4.0}))
    assert (missing["uses"], missing["decision"]) == (None, "not measured")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_quick_run_has_the_sqpoll_rows(tmp_path: Path) -> None:
    for tool in ("wrk", "strace", "cc", "taskset"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed")
    if note := servers.prepare(completion.sqpoll_server()):
        pytest.skip(note)
    out = tmp_path / "completion.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.completion", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    sq = data["sqpoll"]
    rows = {(p["server"], p["depth"]): p for p in sq["points"]}
    assert set(rows) == {(s, d) for s in ("c-uring", "c-uring-sqpoll") for d in (1, 24)}
    assert all(p["status"] == "ok" and p["rps"] > 0 and p["cpu_us_per_request"] > 0 for p in rows.values()), rows
    assert sq["decision"] in ("uses SQPOLL", "does not use SQPOLL") and set(sq["cpu_ratio"]) == {"1", "24"}
    for (server, _), p in rows.items():
        pollers = [t for t in p["threads"] if t["name"].startswith("iou-sqp")]
        assert len(pollers) == (server == "c-uring-sqpoll"), p["threads"]
        # The process clock counts every thread, the poller's too (ticks of 10 ms against nanoseconds).
        assert abs(p["threads_cpu_s"] - p["cpu_s"]) <= 0.03 + 0.1 * p["cpu_s"], p
        if sq["pinning"]["enabled"]:
            assert all(t["allowed"] == sq["pinning"]["server_cpus"] for t in p["threads"]), p["threads"]
    counted = {(p["server"], p["depth"]) for p in data["syscalls"]["points"] if p.get("per_request")}
    assert {("c-uring-sqpoll", 1), ("c-uring-sqpoll", 24)} <= counted
    table = out.with_name("completion_sqpoll.md").read_text()
    assert "| `c-uring-sqpoll` | 24 |" in table and sq["decision"] in table
