"""benchmarks/instructions.py: its worker runs each operation on each loop, its table renders its JSON,
and a --quick run counts and writes under benchmarks/results/local/ only.

The full count (valgrind) is the benchmark's, not a test's: it takes
minutes.  What can break quietly is checked here: an operation that no
longer runs on a loop, a row the table drops.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from benchmarks import instructions
from benchmarks.harness.machine import ROOT
from tinyloop import stages


def _uv_missing() -> str | None:
    return stages.get("uv").unavailable()


@pytest.mark.parametrize("op", list(instructions.OPERATIONS))
@pytest.mark.parametrize("loop", ["asyncio", "aio", "uv"])
def test_the_worker_runs_every_operation(loop, op):
    if loop == "uv" and _uv_missing():
        pytest.skip(_uv_missing())
    assert instructions.main(["--worker", loop, op, "200"]) == 0


@pytest.mark.slow  # compiles the per-timer variant first (scripts/test.sh's slow step)
@pytest.mark.timeout(900)  # the variant's first build (benchmarks/uv_variants.py) compiles the extension
def test_the_per_timer_variant_runs_every_operation_in_its_own_process():
    # Its build replaces tinyloop.uv's extension, which only a fresh process can load.
    if _uv_missing():
        pytest.skip(_uv_missing())
    for op in instructions.OPERATIONS:
        done = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--worker", instructions.PER_TIMER,
                               op, "200"], capture_output=True, text=True, timeout=800, cwd=ROOT)
        assert done.returncode == 0, done.stderr


def test_the_table_has_a_row_per_loop_and_says_what_a_count_is():
    data = {"loops": ["uv", "uvloop"], "operations": ["call_soon", "timer_fire"],
            "counts": {"uv": {"call_soon": 3044.2, "timer_fire": 3636.0},
                       "uvloop": {"call_soon": 3307.0, "timer_fire": "not run: no uvloop"}},
            "valgrind": "valgrind-3.19.0", "python": "3.11.7", "date": "2026-11-23"}
    table = instructions.render(data)
    assert "| uv | 3,044 | 3,636 |" in table
    assert "| uvloop | 3,307 | not run: no uvloop |" in table
    assert "not a time" in table


@pytest.mark.slow  # a quick run under valgrind, about a minute (scripts/test.sh's slow step)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.timeout(300)
def test_a_quick_run_counts_and_writes_under_local_only():
    committed = ["git", "status", "--porcelain", "--", "benchmarks/results"]
    before = subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout
    done = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--quick"], capture_output=True,
                          text=True, timeout=280, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout == before
    assert done.stdout.rstrip().splitlines()[-1].startswith("fewest instructions per operation: call_soon ")
    data = json.loads((ROOT / "benchmarks/results/local/instructions.json").read_text(encoding="utf-8"))
    assert set(data["counts"]) == {"asyncio", "aio"} and all(row["call_soon"] > 0 for row in data["counts"].values())


def test_the_committed_counts_say_what_the_libuv_chapter_says():
    # libuv.md, under the table: "The heap wins both" (timer_cancel and timer_fire, uv against the
    # per-timer variant).  A count that turns fails here until the sentence says what it shows.
    data = json.loads((ROOT / "benchmarks/results/instructions.json").read_text(encoding="utf-8"))
    text = " ".join((ROOT / "chapters/libuv.md").read_text(encoding="utf-8").split())
    assert "The heap wins both" in text
    for op in ("timer_cancel", "timer_fire"):
        assert data["counts"]["uv"][op] < data["counts"][instructions.PER_TIMER][op], op
