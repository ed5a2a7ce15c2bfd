"""benchmarks/race.py: Part VI's one-command table of ring against uv, uvloop and the C floors.

The goals' reading (met when ring's median is at or below uv's, strictly
below on pipelined HTTP; inside the noise when the ranges of repetitions
overlap) is checked on made-up results in the three tools' shapes; the
quick run (slow: about two minutes) checks that the one command fills
every cell of the rows it races.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import race
from tinyloop.raw.uring import unavailable

ROOT = Path(__file__).resolve().parents[1]


def _row(median: float, low: float, high: float, figure: str) -> dict:
    return {figure: median, "spread": {figure: [low, high]}}


def _made_up(ring: dict[str, tuple[float, float, float]], uv: dict[str, tuple[float, float, float]]) -> tuple:
    """The echo and HTTP tools' JSON, with ring's and uv's figures per goal column."""
    echo = {"results": {"1024": {}}}
    http: dict = {"results": {"ab-keepalive": {}, "wrk": {}, "wrk-pipeline": {}}}
    for column, (tool, key), _ in race.GOALS:
        target, figure = (echo, "cpu_us_per_msg") if tool == "echo" else (http, "cpu_us_per_req")
        target["results"][key][race.server(race.ROWS["ring"], column)] = _row(*ring[column], figure)
        target["results"][key][race.server(race.ROWS["uv"], column)] = _row(*uv[column], figure)
    counted = {"points": [{"server": "ring", "depth": 24, "per_request": {"total": 0.004}},
                          {"server": "uv", "depth": 24, "per_request": {"total": 0.09}}]}
    return echo, http, counted


def _columns(value: tuple[float, float, float]) -> dict[str, tuple[float, float, float]]:
    return {column: value for column, *_ in race.GOALS}


def test_a_goal_is_met_at_or_below_uv_and_pipelined_only_strictly_below() -> None:
    level = race.verdicts(race.figures(*_made_up(_columns((5.0, 4.8, 5.2)), _columns((5.0, 4.9, 5.1)))))
    met = {v["goal"]: v["met"] for v in level}
    assert met.pop("wrk pipelined, depth 24") is False   # level is not "less"
    assert all(met.values()), met
    assert all(v["overlap"] for v in level)


def test_a_dearer_ring_is_not_met_and_apart_ranges_are_said_to_be_apart() -> None:
    dearer = race.verdicts(race.figures(*_made_up(_columns((7.0, 6.8, 7.3)), _columns((5.0, 4.9, 5.1)))))
    assert [v["met"] for v in dearer] == [False] * len(race.GOALS)
    assert not any(v["overlap"] for v in dearer)


def test_one_repetition_has_no_range_to_read_the_noise_from() -> None:
    single = race.verdicts(race.figures(*_made_up(_columns((5.0, 5.0, 5.0)), _columns((5.5, 5.5, 5.5)))))
    assert all(v["met"] and v["overlap"] is None for v in single)


def test_the_table_shows_ranges_syscalls_and_a_missing_row_as_a_dash() -> None:
    echo, http, counted = _made_up(_columns((4.0, 3.5, 4.5)), _columns((5.0, 4.9, 5.1)))
    del http["results"]["wrk"]["uv"]
    table = race.figures(echo, http, counted)
    data = {"table": table, "verdicts": race.verdicts(table), "date": "2026-11-29T00:00:00+00:00",
            "machine": {"cpu_model": "a CPU", "python": "CPython 3.11.7"}, "command": "python -m benchmarks.race",
            "steps": ["python -m benchmarks.echo ..."]}
    text = race.render(data)
    assert "| ring | 4.00 [3.50–4.50] |" in text
    assert "0.00" in text.split("| ring |")[1].splitlines()[0]   # ring's 0.004 calls at depth 24
    assert "- wrk keep-alive: not measured (a row did not run)." in text
    assert "- ab keep-alive: ring 4.00 against uv 5.00; the goal (ring at or below uv) is met. The ranges are apart." in text
    assert "| c-epoll | – |" in text


@pytest.mark.slow
@pytest.mark.alone
def test_the_quick_run_fills_every_cell_of_the_raced_rows(tmp_path: Path) -> None:
    if reason := unavailable():
        pytest.skip(f"io_uring: {reason}")
    for tool in ("wrk", "ab", "cc", "taskset"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed")
    out = tmp_path / "race.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.race", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    for row in ("ring", "uv"):
        missing = [column for column, *_ in race.GOALS if data["table"][row].get(column) is None]
        assert not missing, (row, missing)
    assert all(v["met"] is not None for v in data["verdicts"])
    assert "Command: `python -m benchmarks.race --quick" in out.with_suffix(".md").read_text()


def _runs(tool: str, column: str, pairs: list[tuple[float | None, float | None]]) -> list[dict]:
    """A tool's ``runs`` for one goal column: ring's and uv's figure in each repetition (None: no run)."""
    key, figure = ("1024", "cpu_us_per_msg") if tool == "echo" else ("ab-keepalive", "cpu_us_per_req")
    where = {"size": 1024} if tool == "echo" else {"load": key}
    runs = []
    for rep, figures in enumerate(pairs, start=1):
        for row, value in zip(("ring", "uv"), figures):
            if value is not None:
                runs.append({"rep": rep, "server": race.server(race.ROWS[row], column), "status": "ok",
                             figure: value, **where})
    return runs


def test_paired_ratios_follow_each_repetition_not_the_medians() -> None:
    # Medians 12 against 11 say ring is dearer; paired, ring was cheaper in two
    # repetitions of three (the machine slowed down in between).
    http = {"runs": _runs("http", "ab keep-alive", [(10.0, 11.0), (20.0, 9.0), (12.0, 13.0), (5.0, None)])}
    http["runs"].append({"rep": 5, "server": "ring", "load": "ab-keepalive", "status": "failed",
                         "cpu_us_per_req": 1.0})
    http["runs"].append({"rep": 5, "server": "uv", "load": "ab-keepalive", "status": "ok", "cpu_us_per_req": 9.0})
    found = race.paired({"runs": []}, http)
    assert set(found) == {"ab keep-alive"}
    pair = found["ab keep-alive"]
    assert (pair["pairs"], pair["met"]) == (3, 2)   # the one-sided and the failed repetitions are left out
    assert pair["median"] == pytest.approx(12 / 13) and pair["high"] == pytest.approx(20 / 9)
    assert pair["low"] == pytest.approx(10 / 11)


def test_paired_pipelined_needs_ring_strictly_below_and_echo_reads_its_size() -> None:
    http = {"runs": _runs("http", "wrk pipelined, depth 24", [(4.0, 4.0), (3.9, 4.0)])}
    for run in http["runs"]:
        run["load"] = "wrk-pipeline"
    echo = {"runs": _runs("echo", "echo 1 KiB, streams", [(8.0, 9.0)])}
    found = race.paired(echo, http)
    assert found["wrk pipelined, depth 24"]["met"] == 1   # level is not below
    assert found["echo 1 KiB, streams"]["met"] == 1 and "echo 1 KiB, Protocol" not in found


def test_the_verdict_line_gives_the_paired_ratio() -> None:
    echo, http, counted = _made_up(_columns((5.0, 4.0, 6.0)), _columns((5.5, 4.5, 6.5)))
    table = race.figures(echo, http, counted)
    data = {"table": table, "verdicts": race.verdicts(table), "date": "2026-11-30T00:00:00+00:00",
            "machine": {}, "command": "python -m benchmarks.race", "steps": [],
            "paired": {"ab keep-alive": {"median": 0.9, "low": 0.8, "high": 1.1, "met": 4, "pairs": 5}}}
    text = race.render(data)
    assert ("inside the noise, the order may change in another run. Paired by repetition, ring/uv 0.90 "
            "[0.80–1.10]; ring at or below uv in 4 of 5 repetitions.") in text
