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
