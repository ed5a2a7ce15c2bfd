# tests/test_idle_benchmark.py
#
# benchmarks/idle.py: that it really holds N idle connections open on the
# server while it loads it (the server's descriptor count grows by exactly
# N, and every idle connection is still open after the load), that its JSON
# has the shape the book's {bench-idle} directive reads, and that select is
# capped below FD_SETSIZE; and that the book's {bench-idle} directive
# renders that JSON, or says how to make it.  One small run, on tiny
# numbers: nothing here looks at its speed.  The committed reference run
# (benchmarks/results/idle.json) is read once, to hold the readiness
# chapter's sentences about it to what it shows.

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import idle
from benchmarks.harness import experiment
from benchmarks.harness.summary import slope
from test_docs import BUILD_TIMEOUT, page_text, sphinx_build

ROOT = Path(__file__).resolve().parent.parent

IDLE = 30
STAGES = ["select", "poll", "epoll"]


# One worker runs this module under pytest-xdist: its module fixture's run is made once.
pytestmark = pytest.mark.xdist_group("idle-run")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """One run of the script: three stages at 0 and IDLE idle connections; ``(json, table text)``."""
    if shutil.which("ab") is None:
        pytest.skip("ApacheBench (ab) is not installed")
    out = tmp_path_factory.mktemp("idle")
    command = [sys.executable, "-m", "benchmarks.idle", "--quick", "--stages", ",".join(STAGES),
               "--counts", f"0,{IDLE}", "--out", str(out / "idle.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("CPU µs per request, fewest -> most idle")
    return (json.loads((out / "idle.json").read_text(encoding="utf-8")),
            (out / "idle.txt").read_text(encoding="utf-8"))


@pytest.mark.slow  # the module's run, ~10 s on 2 cores: the slow step runs it
@pytest.mark.timeout(120)
def test_every_run_succeeds_and_answers_every_request(run: tuple[dict, str]) -> None:
    data, _ = run
    assert [(r["stage"], r["idle"]) for r in data["runs"]] == [(s, n) for s in STAGES for n in (0, IDLE)]
    for record in data["runs"]:
        assert record["status"] == "ok", record
        assert record["completed"] == idle.QUICK["requests"] and record["failed"] == 0, record
        assert record["cpu_us_per_req"] > 0 and record["rps"] > 0 and record["p99_ms"] > 0, record


@pytest.mark.slow  # the module's run, ~10 s on 2 cores: the slow step runs it
@pytest.mark.timeout(120)
def test_the_server_really_holds_the_idle_connections(run: tuple[dict, str]) -> None:
    data, _ = run
    by = {(r["stage"], r["idle"]): r for r in data["runs"]}
    for stage in STAGES:
        quiet, busy = by[stage, 0], by[stage, IDLE]
        assert busy["server_fds"] - quiet["server_fds"] == IDLE, (quiet, busy)
        # Still registered after the load: none closed by the server, no descriptor gained or lost.
        assert busy["idle_still_open"] == IDLE
        assert busy["server_fds_after"] == busy["server_fds"]


@pytest.mark.slow  # the module's run, ~10 s on 2 cores: the slow step runs it
@pytest.mark.timeout(120)
def test_the_json_has_what_the_book_reads(run: tuple[dict, str]) -> None:
    data, text = run
    assert data["schema"] == experiment.SCHEMA
    assert data["machine"]["cpus"] and data["machine"]["python"]
    assert data["settings"]["stages"] == STAGES and data["settings"]["counts"] == [0, IDLE]
    assert "-k" in data["load_command"].split() and "-c 10" in data["load_command"]
    for record in data["runs"]:  # one repetition: each summary's medians are that run's figures
        summary = data["results"][record["stage"]][str(record["idle"])]
        assert summary["status"] == "ok" and summary["ok_runs"] == 1
        assert (summary["cpu_us_per_req"], summary["server_fds"]) == (record["cpu_us_per_req"],
                                                                      record["server_fds"])
    # Wait calls are counted where perf can count them, and otherwise the JSON says why not.
    settings = data["settings"]
    assert settings["waits_counted"] or settings["waits_note"]
    if settings["waits_counted"]:
        assert all(r["waits_per_req"] > 0 for r in data["runs"])
    header, rows = idle.table(data, "cpu")
    assert header[1:3] == ["0 idle", f"{IDLE} idle"] and [row[0] for row in rows] == STAGES
    assert text == idle.render(data)
    assert "CPU µs/req" in text and "server descriptors" in text


def test_select_is_capped_below_fd_setsize() -> None:
    assert idle.SELECT_CAP < idle.FD_SETSIZE - 10  # room for ab's ten connections and the listener
    assert idle.counts_for("select", [0, 250, 1000, 4000]) == {0: 0, 250: 250, 1000: 1000, 4000: None}
    assert idle.counts_for("select", [0, 3000]) == {0: 0, 3000: idle.SELECT_CAP}
    assert idle.counts_for("poll", [0, 4000]) == {0: 0, 4000: 4000}


def _summary(cpu: float | None, status: str = "ok") -> dict:
    return {"runs": 3, "ok_runs": 3 if status == "ok" else 1, "cpu_us_per_req": cpu, "rps": 1000.0,
            "p99_ms": 1.0, "waits_per_req": 0.1 if cpu else None, "server_fds": 4.0, "status": status,
            "note": None if status == "ok" else "2 of 3 runs: timeout"}


def test_the_table_marks_capped_partial_and_missing_cells() -> None:
    data = {"settings": {"stages": ["select", "poll"], "counts": [0, 500, 2000], "select_cap": 1000,
                         "waits_counted": True},
            "runs": [],
            "results": {"select": {"0": _summary(10.0), "500": _summary(20.0), "1000": _summary(30.0)},
                        "poll": {"0": _summary(10.0), "500": _summary(15.0, "partial"),
                                 "2000": _summary(None, "timeout")}}}
    header, rows = idle.table(data, "cpu")
    assert header == ["stage", "0 idle", "500 idle", "2000 idle", "+µs/req per 1000 idle",
                      "ns per idle fd per wait"]
    select_row, poll_row = rows
    assert select_row[0] == "select (at most 1000 idle: FD_SETSIZE)"
    assert select_row[1:4] == ["10", "20", "30 (at 1000)"]
    assert select_row[4] == "+20.0"            # 10 µs/req more per 1000 idle connections
    assert select_row[5] == "+200"             # ... which is 100 µs per wait (0.1 waits/req): 200 ns per fd
    assert poll_row[1:4] == ["10", "15*", "timeout"]


@pytest.mark.slow  # a whole book build, ~13 s (the slow step runs it)
@pytest.mark.timeout(120 + BUILD_TIMEOUT)
def test_the_book_renders_the_run(run: tuple[dict, str], tmp_path: Path) -> None:
    data, _ = run
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.md").write_text("# Idle\n\n```{bench-idle}\n```\n\n```{bench-idle}\n:figure: fds\n```\n",
                                     encoding="utf-8")
    results = tmp_path / "idle.json"
    results.write_text(json.dumps(data), encoding="utf-8")
    built = sphinx_build(source, tmp_path / "out", "-D", f"book_idle_results={results}")
    assert built.returncode == 0, built.stdout + built.stderr
    text = page_text((tmp_path / "out" / "html" / "index.html").read_text(encoding="utf-8"))
    assert "CPU µs/req" in text and f"{IDLE} idle" in text and "+µs/req per 1000 idle" in text
    fds = data["results"]["poll"][str(IDLE)]["server_fds"]
    assert f"poll {data['results']['poll']['0']['server_fds']:.0f} {fds:.0f}" in text  # the fds table's row
    assert data["load_command"] in text and "Measured on:" in text and "1 run" in text


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_without_results_the_book_says_how_to_make_them(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.md").write_text("# Idle\n\n```{bench-idle}\n```\n", encoding="utf-8")
    built = sphinx_build(source, tmp_path / "out", "-D", f"book_idle_results={tmp_path / 'missing.json'}")
    assert built.returncode == 0, built.stdout + built.stderr
    text = page_text((tmp_path / "out" / "html" / "index.html").read_text(encoding="utf-8"))
    assert "No idle-connection results yet: run python -m benchmarks.idle" in text


def _said(text: str, phrase: str) -> bool:
    """True if ``phrase`` is in ``text``, whatever the line breaks and spaces between its words."""
    return " ".join(phrase.split()) in " ".join(text.split())


def test_the_readiness_prose_agrees_with_the_committed_run() -> None:
    """What chapters/readiness.md says of benchmarks/results/idle.json holds in that file; a new
    reference run that breaks a sentence fails here, and the sentence is rewritten to say what the
    run shows."""
    data = json.loads((ROOT / "benchmarks" / "results" / "idle.json").read_text(encoding="utf-8"))
    text = (ROOT / "chapters" / "readiness.md").read_text(encoding="utf-8")
    results = data["results"]
    cpu = {stage: {int(n): s["cpu_us_per_req"] for n, s in by.items()} for stage, by in results.items()}
    spread = {stage: {int(n): s["spread"]["cpu_us_per_req"] for n, s in by.items()} for stage, by in results.items()}
    flat, climbing = ("epoll", "epoll-et", "kqueue"), ("select", "poll")

    # "`select`, `poll` and `epoll` cost about the same ..., `epoll-et` and `kqueue` a little more at the
    # median ..., and the ranges of the repetitions of all five overlap"
    assert _said(text, "`select`, `poll` and `epoll` cost about the same")
    assert _said(text, "the ranges of the repetitions of all five overlap")
    lows, highs = zip(*(spread[stage][0] for stage in cpu))
    assert max(lows) <= min(highs), "0 idle: the five ranges no longer overlap; say so in readiness.md"
    assert min(cpu["epoll-et"][0], cpu["kqueue"][0]) > max(cpu[s][0] for s in ("select", "poll", "epoll")), (
        "0 idle: epoll-et and kqueue are no longer above the other three at the median")

    # "`select` and `poll` grow with N" (select faster: "the `select` row climbs faster than the `poll`
    # row"); "`epoll`, `epoll-et` and `kqueue` stay flat ..., their slopes near zero and the ranges of
    # their repetitions overlapping from one N to any other"
    slopes = {stage: slope(sorted(cpu[stage].items())) * 1000 for stage in cpu}
    assert 0 < slopes["poll"] < slopes["select"], slopes
    assert all(abs(slopes[stage]) < slopes["poll"] / 10 for stage in flat), slopes
    for stage in flat:
        ranges = list(spread[stage].values())
        assert all(a[0] <= b[1] and b[0] <= a[1] for a in ranges for b in ranges), (
            f"{stage}: two idle counts' ranges no longer overlap; say so in readiness.md")

    # "in the `poll` row the waits per request fall a little as N grows ..., one wait per ten requests,
    # where `select`'s row is from the start"
    assert _said(text, "in the `poll` row the waits per request fall a little as N grows")
    waits = {stage: {int(n): s["waits_per_req"] for n, s in by.items()} for stage, by in results.items()}
    counts = sorted(waits["poll"])
    assert waits["poll"][counts[0]] > waits["poll"][counts[-1]] and round(waits["poll"][counts[-1]], 2) == 0.10
    assert all(round(value, 2) == 0.10 for value in waits["select"].values())

    # "requests per second, which falls with N for `select` and `poll` ...; p99 latency, which grows for
    # `select` and `poll` at the larger counts"
    for stage in climbing:
        by = results[stage]
        fewest, most = str(min(cpu[stage])), str(max(cpu[stage]))
        assert by[most]["rps"] < by[fewest]["rps"] and by[most]["p99_ms"] > by[fewest]["p99_ms"], stage
