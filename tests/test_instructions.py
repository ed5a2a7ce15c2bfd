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


# --- per request: the server's count under a load, and the HTTP layer alone ------------------

def test_the_http_layer_alone_answers_each_load_it_is_counted_for():
    for load, (program, *_rest) in instructions.REQUEST_LOADS.items():
        if program == "http":
            instructions.http_layer_alone(load, 48)   # raises RuntimeError on a wrong answer


def test_derive_subtracts_the_floor_and_bounds_each_loop_against_its_rivals():
    data = {"loads": ["keepalive", "echo-1k"],
            "counts": {"floor": {"keepalive": 40_000.0, "echo-1k": "—"},
                       "asyncio": {"keepalive": 60_000.0, "echo-1k": 20_000.0},
                       "aio": {"keepalive": 50_000.0, "echo-1k": 15_000.0},
                       "uvloop": {"keepalive": 44_000.0, "echo-1k": 4_000.0},
                       "rloop": {"keepalive": "not counted: timed out", "echo-1k": 3_000.0},
                       "uv": {"keepalive": 43_000.0, "echo-1k": 3_500.0}}}
    derived = instructions.derive(data)
    assert derived["own"]["uv"] == {"keepalive": 3_000.0}   # no floor for echo: no "own" there
    assert derived["own"]["asyncio"]["keepalive"] == 20_000.0
    assert "rloop" not in derived["own"]                      # a cell not counted is left out
    assert derived["lowest"]["uv"]["keepalive"] == pytest.approx(40_000 / 44_000)  # uvloop: rloop not counted
    assert derived["lowest"]["aio"]["keepalive"] == pytest.approx(40_000 / 60_000)
    data["counts"]["ring"] = {"keepalive": 80_000.0, "echo-1k": 9_000.0}
    data.update(instructions.derive(data))
    text = instructions.render_requests({**data, "loops": ["floor", "asyncio", "uvloop", "rloop", "aio", "uv", "ring"],
                                         "valgrind": "valgrind-3.19.0", "python": "3.11.7",
                                         "date": "2026-11-29T04:02:00+00:00"})
    assert "| keepalive | 60,000 | 44,000 | not counted: timed out | 50,000 (0.83×) | 43,000 (0.98×) | 80,000 (1.86×) |" in text
    assert "| keepalive | 40,000 | 20,000 | 4,000 | not counted: timed out | 10,000 (0.50×) | 3,000 (0.75×) " in text
    assert text.count("| echo-1k |") == 1                     # no second row where there is no floor
    assert "fewest instructions per request: keepalive uv 43,000" in instructions.conclusion_requests(data)


def test_the_committed_per_request_counts_carry_what_derive_makes_of_them():
    data = json.loads((ROOT / "benchmarks" / "results" / "instructions_requests.json").read_text())
    assert data["loops"][0] == instructions.FLOOR and data["loads"] == list(instructions.REQUEST_LOADS)
    assert {key: data[key] for key in ("own", "lowest")} == instructions.derive(data)
    assert (ROOT / "benchmarks" / "results" / "instructions_requests.md").read_text() == \
        instructions.render_requests(data)


def test_merge_replaces_a_recounted_loop_and_says_so(tmp_path):
    committed = ROOT / "benchmarks" / "results" / "instructions_requests.json"
    into = tmp_path / "instructions_requests.json"
    shutil.copy(committed, into)
    before = json.loads(into.read_text())
    recount = {"loops": ["ring"], "loads": before["loads"], "date": "2026-11-29T09:00:00+00:00",
               "command": "python -m benchmarks.instructions --requests all --loops ring",
               "counts": {"ring": {load: 1000.0 + i for i, load in enumerate(before["loads"])}}}
    counted = tmp_path / "ring.json"
    counted.write_text(json.dumps(recount))
    assert instructions.merge(counted, "the loop changed", into) == 0
    after = json.loads(into.read_text())
    assert after["counts"]["ring"] == recount["counts"]["ring"]
    assert after["counts"]["uv"] == before["counts"]["uv"] and after["date"] == before["date"]
    assert after["added"]["ring"] == {"date": recount["date"], "command": recount["command"],
                                      "loads": before["loads"], "why": "the loop changed"}
    assert after["own"]["ring"]["keepalive"] == 1002.0 - before["counts"]["floor"]["keepalive"]
    table = into.with_suffix(".md").read_text()
    assert table == instructions.render_requests(after)
    assert "ring: every load counted after the run (2026-11-29 09:00" in table


@pytest.mark.parametrize("change", ["fewer loads", "the floor"])
def test_merge_refuses_a_partial_recount_and_the_floor(tmp_path, change):
    committed = ROOT / "benchmarks" / "results" / "instructions_requests.json"
    into = tmp_path / "instructions_requests.json"
    shutil.copy(committed, into)
    loads = json.loads(into.read_text())["loads"]
    loop = "floor" if change == "the floor" else "ring"
    counted = tmp_path / "partial.json"
    counted.write_text(json.dumps({"loops": [loop], "loads": loads[:1] if change == "fewer loads" else loads,
                                   "date": "d", "command": "c", "counts": {loop: {}}}))
    with pytest.raises(SystemExit):
        instructions.merge(counted, "why", into)
    assert into.read_text() == committed.read_text()  # nothing written
