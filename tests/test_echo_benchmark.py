# tests/test_echo_benchmark.py
#
# benchmarks/echo.py and micro.py, and the book's {bench-echo} and {bench-micro}: one tiny echo run
# (1 KiB, one repetition, two loops and a third made to look missing), fabricated numbers for the
# rest.  Nothing here looks at a speed.

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import echo, micro
from benchmarks.harness import output, process
from benchmarks.servers import Server
from test_docs import BUILD_TIMEOUT, page_text, sphinx_build
from tinyloop import stages

ROOT = Path(__file__).resolve().parent.parent

MISSING = "uvloop-protocol"  # the loop the tiny run pretends is not installed


# One worker runs this module under pytest-xdist: its module fixture's run is made once.
pytestmark = pytest.mark.xdist_group("echo-run")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """echo.py's main on 1 KiB, one short repetition, asyncio and aio (MISSING skipped):
    ``(the JSON it wrote, what it printed)``."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the echo client and the C floor")
    out = tmp_path_factory.mktemp("echo") / "echo.json"
    patch = pytest.MonkeyPatch()
    patch.setitem(echo._PEERS, MISSING, Server(MISSING, "peer", "pretend", (), needs="module:tinyloop_no_such_loop"))
    try:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = echo.main(["--servers", f"asyncio-protocol,aio-protocol,{MISSING}", "--sizes", "1",
                              "--repeat", "1", "--duration", "0.2", "--warmup", "0.05", "--timeout", "3",
                              "--no-pin", "--out", str(out)])
    finally:
        patch.undo()
    assert code == 0, printed.getvalue()
    return json.loads(out.read_text(encoding="utf-8")), printed.getvalue()


@pytest.mark.timeout(120)
def test_the_json_has_the_fields_the_book_reads(tiny_run: tuple[dict, str]) -> None:
    data, _ = tiny_run
    assert data["schema"] == 1 and data["baseline"] == "asyncio-protocol"
    assert {"cpu_model", "cpus", "kernel", "python"} <= set(data["machine"])  # harness.machine.fingerprint()
    assert data["settings"]["sizes"] == [1024] and data["settings"]["connections"] == 10
    assert data["settings"]["repeat"] == 1 and data["pinning"]["enabled"] is False
    assert "echo_client" in data["client"] and "--size BYTES" in data["client"]
    assert [(r["server"], r["size"], r["rep"]) for r in data["runs"]] == [
        ("asyncio-protocol", 1024, 1), ("aio-protocol", 1024, 1)]
    for record in data["runs"]:
        assert record["status"] == "ok", record
        assert record["messages"] > 0 and record["errors"] == 0
        for figure in ("msgs_per_s", "mib_per_s", "cpu_us_per_msg", "p50_us", "p99_us"):
            assert record[figure] is not None and record[figure] > 0, (figure, record)
    row = data["results"]["1024"]["aio-protocol"]
    assert {"spread", "noisy", "ratio", "status", "ok_runs"} <= set(row)
    assert row["noisy"] is False  # one repetition: nothing to compare
    assert 0 < row["server_busy"] <= 1.05  # CPU seconds per second of the run, one core at most


@pytest.mark.timeout(120)
def test_ratios_divide_by_the_baseline_row(tiny_run: tuple[dict, str]) -> None:
    data, _ = tiny_run
    rows = data["results"]["1024"]
    base, other = rows["asyncio-protocol"], rows["aio-protocol"]
    assert base["ratio"]["msgs_per_s"] == pytest.approx(1.0)
    for figure in ("msgs_per_s", "cpu_us_per_msg"):
        assert other["ratio"][figure] == pytest.approx(other[figure] / base[figure])


@pytest.mark.timeout(120)
def test_a_missing_loop_is_skipped_with_a_note(tiny_run: tuple[dict, str]) -> None:
    data, printed = tiny_run
    entry = next(s for s in data["servers"] if s["name"] == MISSING)
    assert "tinyloop_no_such_loop" in entry["skipped"]
    assert MISSING not in data["results"]["1024"]
    assert f"skip {MISSING}:" in printed
    _, rows = echo.table(data, 1024)
    assert [MISSING, "skipped"] == next(r for r in rows if r[0] == MISSING)[:2]
    assert any(note.startswith(f"{MISSING}: skipped") for note in echo.notes(data))


def test_user_runs_go_to_an_ignored_directory_and_save_to_the_reference() -> None:
    if shutil.which("git") and (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", str(output.LOCAL / "echo.json")], cwd=ROOT, timeout=10)
        assert ignored.returncode == 0, "benchmarks/results/local/ should be ignored by git"
    with pytest.raises(SystemExit):
        echo.main(["--reference", "--quick"])  # the reference is a full run's


# --- fabricated numbers ----------------------------------------------------------

def _record(server: str, msgs: float | None, cpu: float | None, status: str = "ok", size: int = 1024) -> dict:
    return {"server": server, "size": size, "status": status, "note": None if status == "ok" else "boom",
            "msgs_per_s": msgs, "mib_per_s": msgs and msgs / 1024, "cpu_us_per_msg": cpu,
            "p50_us": 100.0, "p99_us": 200.0, "client_cpu_us_per_msg": 5.0}


def test_a_spread_wider_than_25_percent_is_flagged_noisy() -> None:
    records = [_record("asyncio-protocol", 1000, 20), _record("asyncio-protocol", 1200, 21),   # 20% apart
               _record("aio-protocol", 1000, 20), _record("aio-protocol", 1300, 20),           # 30% apart
               _record("go", 5000, 5.0), _record("go", 5000, 6.5),                             # CPU 30% apart
               _record("node", 3000, 9)]                                                       # one run
    rows = echo.summarize(records)["1024"]
    assert rows["asyncio-protocol"]["noisy"] is False
    assert rows["aio-protocol"]["noisy"] is True    # by messages/s
    assert rows["go"]["noisy"] is True              # by CPU per message
    assert rows["node"]["noisy"] is False
    assert rows["aio-protocol"]["spread"]["msgs_per_s"] == [1000, 1300]
    assert rows["aio-protocol"]["msgs_per_s"] == 1150  # the median of two


def test_without_a_baseline_row_there_are_no_ratios() -> None:
    rows = echo.summarize([_record("go", 5000, 5)], baseline=None)["1024"]
    assert rows["go"]["ratio"]["msgs_per_s"] is None


def test_the_text_table_marks_noise_partial_rows_and_ratios() -> None:
    records = [_record("asyncio-protocol", 1000, 20), _record("asyncio-protocol", 1000, 20),
               _record("aio-protocol", 1000, 10), _record("aio-protocol", 1400, 10),
               _record("go", 2000, 5), _record("go", None, None, status="timeout")]
    data = {"baseline": "asyncio-protocol", "results": echo.summarize(records),
            "servers": [{"name": n, "skipped": None} for n in ("asyncio-protocol", "aio-protocol", "go")]}
    _, rows = echo.table(data, 1024)
    assert rows[0][1] == "1,000 (1.00×)"
    assert rows[1][3] == "10.0 (0.50×)" and rows[1][-1].endswith("noisy")
    assert rows[2][0] == "go*"  # partial


def test_the_clients_line_is_parsed_and_garbage_is_not() -> None:
    line = "messages=10 bytes=10240 seconds=0.5 errors=0 timeout=0 p50_us=80.5 p99_us=120.0 cpu_s=0.01"
    parsed = echo.parse_client("noise\n" + line + "\n")
    assert parsed is not None and parsed["messages"] == 10 and parsed["p99_us"] == 120.0
    assert echo.parse_client("") is None and echo.parse_client("messages=x") is None


@pytest.mark.timeout(60)
def test_a_server_that_does_not_start_is_an_error_row() -> None:
    broken = Server("broken", "peer", "exits at once", (sys.executable, "-c", "raise SystemExit(3)"))
    pinning = process.choose_pinning(True)
    record = echo.measure(broken, 1024, echo.Settings(duration=0.1, warmup=0.05, timeout=1), pinning)
    assert record["status"] == "error" and record["note"].startswith("did not start")


# --- micro.py -------------------------------------------------------------------------

def test_micro_ratios_and_noise_on_fabricated_values() -> None:
    values = {("call_soon", "asyncio"): [1e-6, 1.1e-6, 1.2e-6],
              ("call_soon", "aio"): [5e-7, 7e-7, 6e-7],
              ("call_soon", "callbacks"): [4e-7, 4e-7, 4e-7]}
    rows = micro.summarize(values)["call_soon"]
    assert rows["asyncio"]["ratio"] == pytest.approx(1.0)
    assert rows["aio"]["ratio"] == pytest.approx(600 / 1100)
    assert rows["aio"]["noisy"] is True and rows["asyncio"]["noisy"] is False  # 40% vs 20% apart
    assert rows["callbacks"]["ops_per_s"] == pytest.approx(2.5e6)


def test_the_reactor_only_runs_what_it_has() -> None:
    pairs = micro.benchmarks(["asyncio", "callbacks"], list(micro.OPERATIONS))
    assert ("call_soon", "callbacks") in pairs and ("timer_cancel", "callbacks") in pairs
    assert ("sleep0", "callbacks") not in pairs and ("create_task", "asyncio") in pairs


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("op", "loop"), micro.benchmarks(["asyncio", "aio", "uv", "callbacks"], list(micro.OPERATIONS)))
def test_each_operation_runs_and_returns_seconds(op: str, loop: str) -> None:
    if loop == "uv" and (why := stages.get("uv").unavailable()):
        pytest.skip(f"uv: {why}")
    function = micro.OPERATIONS[op][0]
    seconds = function(micro.BATCH + 3, micro.factory_for(loop))  # two batches, the second short
    assert seconds > 0


@pytest.mark.slow  # a whole small run of the benchmark: the slow step (CI) runs it
@pytest.mark.timeout(120)
def test_a_tiny_pyperf_run_writes_both_jsons(tmp_path: Path) -> None:
    pytest.importorskip("pyperf")
    summary = tmp_path / "micro.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.micro", "--quick",
                           "--processes", "1", "--values", "1", "--min-time", "0.001",
                           "--event-loops", "asyncio,callbacks", "--ops", "call_soon",
                           "--out", str(summary)],
                          capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(summary.read_text(encoding="utf-8"))
    assert data["baseline"] == "asyncio" and data["settings"]["processes"] == 1
    assert set(data["results"]["call_soon"]) == {"asyncio", "callbacks"}
    assert (tmp_path / "micro-pyperf.json").exists()
    assert "call_soon" in micro.format_text(data)


# --- the book ------------------------------------------------------------------------

MICRO_FIXTURE = {
    "schema": 1, "date": "2026-01-31T12:00:00+00:00", "command": "python benchmarks/micro.py",
    "machine": {"cpu_model": "Fixture CPU", "cpus": 2, "system": "Linux", "kernel": "6.1",
                "python": "CPython 3.11.7"},
    "settings": {"quick": False, "processes": 5, "values": 3, "affinity": "0"},
    "baseline": "asyncio", "operations": [{"name": "call_soon", "what": "call_soon + run one callback"}],
    "loops": [{"name": "asyncio", "skipped": None}, {"name": "uvloop", "skipped": "does not import (x)"}],
    "results": micro.summarize({("call_soon", "asyncio"): [1.234e-6, 1.234e-6]}),
}


@pytest.mark.timeout(120 + BUILD_TIMEOUT)
def test_the_book_renders_both_tables(tiny_run: tuple[dict, str], tmp_path: Path) -> None:
    data, _ = tiny_run
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.md").write_text("# Echo\n\n```{bench-echo}\n:size: 1\n```\n\n```{bench-micro}\n```\n",
                                     encoding="utf-8")
    echo_json, micro_json = tmp_path / "echo.json", tmp_path / "micro.json"
    echo_json.write_text(json.dumps(data), encoding="utf-8")
    micro_json.write_text(json.dumps(MICRO_FIXTURE), encoding="utf-8")
    built = sphinx_build(source, tmp_path / "out", "-D", f"book_echo_results={echo_json}",
                         "-D", f"book_micro_results={micro_json}")
    assert built.returncode == 0, built.stdout + built.stderr
    text = page_text((tmp_path / "out" / "html" / "index.html").read_text(encoding="utf-8"))
    assert "TCP echo, 1 KiB messages, 10 connections" in text and "CPU µs/msg" in text
    assert "aio-protocol" in text and f"{MISSING} skipped" in text and "echo_client" in text
    assert "Measured on:" in text and "1 run" in text
    assert "call_soon: call_soon + run one callback" in text and "1,234" in text  # ns per operation
    assert "uvloop skipped" in text and "pyperf, 5 processes x 3 values, on CPU 0" in text


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_without_results_the_book_says_how_to_make_them(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.md").write_text("# Echo\n\n```{bench-echo}\n```\n\n```{bench-micro}\n:op: sleep0\n```\n",
                                     encoding="utf-8")
    built = sphinx_build(source, tmp_path / "out", "-D", f"book_echo_results={tmp_path / 'none.json'}",
                         "-D", f"book_micro_results={tmp_path / 'none.json'}")
    assert built.returncode == 0, built.stdout + built.stderr
    text = page_text((tmp_path / "out" / "html" / "index.html").read_text(encoding="utf-8"))
    assert "No echo results yet: run python -m benchmarks.echo --reference" in text
    assert "No micro-benchmark results yet: run python -m benchmarks.micro --reference" in text


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_an_unknown_operation_breaks_the_build(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.md").write_text("# Echo\n\n```{bench-micro}\n:op: no_such_op\n```\n", encoding="utf-8")
    micro_json = tmp_path / "micro.json"
    micro_json.write_text(json.dumps(MICRO_FIXTURE), encoding="utf-8")
    built = sphinx_build(source, tmp_path / "out", "-D", f"book_micro_results={micro_json}")
    assert built.returncode != 0 and "no_such_op" in built.stdout + built.stderr
