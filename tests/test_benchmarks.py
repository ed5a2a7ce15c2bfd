# tests/test_benchmarks.py
#
# The benchmark harness: its parsers on real ab and wrk output (tests/data/bench_*), its fold, its
# tables, its output rule, and --quick runs, one with a server that stops answering.  No test looks
# at a speed: they check that the harness measures, reports and cleans up.

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from benchmarks import loads, report
from benchmarks import run as run_module
from benchmarks.harness.process import warm_up
from benchmarks.run import summarize
from tinyloop import stages

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

QUICK_RUN_TIMEOUT = 80  # seconds; the run below takes about 15

# One worker runs this module under pytest-xdist, so the module's --quick run (its
# fixture) is made once, not once per worker.
pytestmark = pytest.mark.xdist_group("benchmarks-quick-run")


def sample(name: str) -> str:
    return (DATA / name).read_text()


# --- parsing real output -------------------------------------------------

def test_ab_close_figures_come_from_the_text_and_percentiles_from_the_csv() -> None:
    result = loads.parse_ab(sample("bench_ab_close.txt"), sample("bench_ab_close.csv"))
    assert result.completed == 2000
    assert result.failed == 0
    assert result.rps == 4450.11
    assert result.seconds == 0.449
    assert (result.p50_ms, result.p99_ms) == (1.231, 14.772)
    assert not result.timed_out and result.error is None


def test_ab_counts_non_2xx_responses_as_failed() -> None:
    result = loads.parse_ab(sample("bench_ab_keepalive_404.txt"), sample("bench_ab_keepalive_404.csv"))
    assert result.completed == 2000
    assert result.failed == 2000  # "Failed requests: 0" + "Non-2xx responses: 2000"


def test_ab_that_gave_up_on_a_silent_server_is_a_timeout_without_figures() -> None:
    result = loads.parse_ab(sample("bench_ab_timeout.txt"))
    assert result.timed_out
    assert "timeout specified has expired" in result.error
    assert result.completed is None and result.rps is None and result.p99_ms is None


def test_ab_interrupted_reports_what_it_measured_so_far() -> None:
    result = loads.parse_ab(sample("bench_ab_interrupted.txt"), sample("bench_ab_interrupted.csv"))
    assert result.completed == 20
    assert result.rps == 16.66
    assert not result.timed_out  # the harness, which sent SIGINT, marks it


def test_wrk_figures_come_from_its_done_hook_in_milliseconds() -> None:
    # The samples are real wrk runs with -s benchmarks/wrk_json.lua; the text
    # report above the JSON line shows the same figures, rounded.
    result = loads.parse_wrk(sample("bench_wrk.txt"))
    assert result.completed == 6974 and result.seconds == pytest.approx(1.089160)
    assert result.rps == pytest.approx(6974 / 1.089160)
    assert "Requests/sec:   6403" in sample("bench_wrk.txt")  # wrk's own figure, to the request
    assert (result.p50_ms, result.p99_ms) == (pytest.approx(13.683), pytest.approx(93.432))  # "99%   93.43ms"
    assert result.failed == 0 and not result.timed_out
    result = loads.parse_wrk(sample("bench_wrk_404.txt"))
    assert result.p50_ms == pytest.approx(0.258)  # "258.00us"


def test_wrk_without_its_json_line_measured_nothing() -> None:
    text = "\n".join(line for line in sample("bench_wrk.txt").splitlines()
                     if not line.startswith(loads.WRK_JSON_MARK))
    assert loads.parse_wrk(text) == loads.Measurement()


def test_wrk_counts_socket_errors_and_non_2xx_as_failed() -> None:
    assert loads.parse_wrk(sample("bench_wrk_404.txt")).failed == 10413
    assert loads.parse_wrk(sample("bench_wrk_errors.txt")).failed == 1270 + 1271  # read errors + 500s


def test_wrk_against_a_silent_server_has_no_responses_and_no_percentiles() -> None:
    result = loads.parse_wrk(sample("bench_wrk_stall.txt"))
    assert result.completed == 0
    assert result.p50_ms is None and result.p99_ms is None


def test_commands_carry_the_settings() -> None:
    settings = loads.Settings({"ab-close": 123, "ab-keepalive": 456}, 2.5, 3.0, 10.0)
    ab = loads.command(loads.get("ab-keepalive"), "http://127.0.0.1:1/", settings, Path("p.csv"))
    assert ab == ["ab", "-q", "-r", "-s", "3", "-n", "456", "-c", "100", "-k", "-e", "p.csv",
                  "http://127.0.0.1:1/"]
    wrk = loads.command(loads.get("wrk"), "http://127.0.0.1:1/", settings)
    assert wrk == ["wrk", "-t1", "-c", "100", "-d", "2.5s", "--timeout", "3s", "--latency",
                   "-s", str(loads.JSON_SCRIPT), "http://127.0.0.1:1/"]
    with pytest.raises(KeyError, match="known loads: ab-close, ab-keepalive, wrk"):
        loads.get("siege")


# --- medians and ratios ---------------------------------------------------

def _run(server: str, rps: float | None, cpu: float | None, status: str = "ok", load: str = "wrk",
         failed: int | None = 0) -> dict:
    return {"server": server, "load": load, "status": status, "note": None if status == "ok" else "why",
            "rps": rps, "p50_ms": 1.0, "p99_ms": 2.0 if rps else None, "completed": 100,
            "failed": failed, "cpu_us_per_req": cpu, "newcomer_ms": None}


def test_summary_is_the_median_of_ok_runs_with_ratios_to_the_baseline() -> None:
    runs = [_run("asyncio-protocol", 100, 50), _run("asyncio-protocol", 300, 40), _run("asyncio-protocol", 200, 60),
            _run("epoll", 500, 10), _run("epoll", 400, 30, failed=2), _run("epoll", None, None, "timeout", failed=5)]
    results = summarize(runs, "asyncio-protocol")["wrk"]
    base, epoll = results["asyncio-protocol"], results["epoll"]
    assert (base["rps"], base["cpu_us_per_req"], base["status"]) == (200, 50, "ok")
    assert base["ratio"] == {"rps": 1.0, "p50_ms": 1.0, "p99_ms": 1.0, "cpu_us_per_req": 1.0}
    # The timed-out run is left out of the medians, counted in "failed" and in the status.
    assert (epoll["rps"], epoll["cpu_us_per_req"]) == (450, 20)
    assert epoll["status"] == "partial" and epoll["ok_runs"] == 1 + 1 and epoll["runs"] == 3
    assert epoll["failed"] == 7
    assert "1 of 3 runs: timeout (why)" == epoll["note"]
    assert epoll["ratio"]["rps"] == pytest.approx(450 / 200)
    assert epoll["ratio"]["cpu_us_per_req"] == pytest.approx(20 / 50)
    # Each figure's spread over the ok runs; more than 25% apart is noisy.
    assert base["spread"]["rps"] == [100, 300] and base["noisy"]
    assert epoll["spread"]["rps"] == [400, 500] and epoll["spread"]["cpu_us_per_req"] == [10, 30]
    assert epoll["noisy"]  # req/s is within 25% (500 = 1.25 x 400), CPU is not


def test_a_row_within_25_percent_is_not_noisy_and_one_run_never_is() -> None:
    runs = [_run("epoll", 400, 20), _run("epoll", 480, 24), _run("poll", 100, 10)]
    results = summarize(runs, None)["wrk"]
    assert results["epoll"]["spread"]["rps"] == [400, 480] and not results["epoll"]["noisy"]
    assert results["poll"]["spread"]["rps"] == [100, 100] and not results["poll"]["noisy"]


def test_summary_of_failed_runs_has_their_status_and_no_figures() -> None:
    runs = [_run("blocking", None, None, "timeout", "ab-keepalive", None)] * 2
    summary = summarize(runs, None)["ab-keepalive"]["blocking"]
    assert summary["status"] == "timeout"
    assert summary["rps"] is None and summary["failed"] is None
    assert summary["ratio"] == {"rps": None, "p50_ms": None, "p99_ms": None, "cpu_us_per_req": None}


# --- the warm-up that says a server is up ---------------------------------

def _one_connection_server(reply: bytes | None,
                           delay: float = 0.0) -> tuple[tuple[str, int], threading.Thread, socket.socket]:
    """A listener that accepts one connection and answers each read with ``reply`` (None: never),
    ``delay`` seconds after it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            try:
                while conn.recv(65536):
                    time.sleep(delay)
                    if reply is not None:
                        conn.sendall(reply)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname(), thread, listener


@pytest.mark.parametrize(("reply", "expected"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nHello, World!\n", None),
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", ("error", "GET / answered 404 b''")),
    (None, ("timeout", "no answer to GET / within 0.3 s")),
])
def test_warm_up_says_whether_the_server_answers(reply: bytes | None, expected: tuple | None) -> None:
    address, thread, listener = _one_connection_server(reply)
    with listener:
        assert warm_up(address, 5, timeout=0.3) == expected
        thread.join(5)


def test_a_warm_up_that_answers_slowly_ends_at_its_limit() -> None:
    # Each answer comes in time (0.1 s < 0.3 s), but 100 of them would take 10 s.
    address, thread, listener = _one_connection_server(
        b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nHello, World!\n", delay=0.1)
    with listener:
        started = time.monotonic()
        status, note = warm_up(address, 100, timeout=0.3, limit=0.5)
        assert time.monotonic() - started < 2
        assert status == "timeout" and note.startswith("the warm-up took over 0.5 s: "), note
        assert note.endswith(" of 100 answers (GET /)")
        thread.join(5)


# --- the report -------------------------------------------------------------

def _data() -> dict:
    runs = [_run("asyncio-protocol", 200, 50), _run("epoll", 400, 25), _run("blocking", None, None, "starved")]
    return {"schema": 1, "date": "2026-01-31T12:00:00+00:00", "baseline": "asyncio-protocol",
            "machine": {"cpu_model": "Test CPU", "cpus": 2, "system": "Linux", "kernel": "6.1",
                        "python": "CPython 3.11.7"},
            "pinning": {"enabled": True, "server_cpus": "0", "load_cpus": "1"},
            "settings": {"repeat": 3, "quick": False},
            "loads": [{"name": "wrk", "title": "wrk -c 100", "command": "wrk URL"}],
            "servers": [{"name": "asyncio-protocol", "kind": "peer"}, {"name": "epoll", "kind": "stage"},
                        {"name": "blocking", "kind": "stage"},
                        {"name": "go-nethttp", "kind": "peer", "skipped": "go is not on PATH"}],
            "runs": runs, "results": summarize(runs, "asyncio-protocol")}


def test_table_rows_stages_first_with_ratios_and_failure_words() -> None:
    header, rows = report.table(_data(), "wrk")
    assert header == ["server", "req/s", "min–max", "p50 ms", "p99 ms", "CPU µs/req", "failed"]
    assert [row[0] for row in rows] == ["epoll", "blocking", "asyncio-protocol", "go-nethttp"]
    assert rows[0] == ["epoll", "400 (2.00×)", "400–400", "1.00 (1.00×)", "2.00 (1.00×)", "25 (0.50×)", "0"]
    assert rows[1][1:] == ["starved", "—", "—", "—", "—", "0"]
    assert rows[3][1:] == ["skipped", "—", "—", "—", "—", "—"]
    assert report.table(_data(), "wrk", ["asyncio-protocol"], ratios=False)[1] == [
        ["asyncio-protocol", "200", "200–200", "1.00", "2.00", "50", "0"]]


def test_a_noisy_row_says_so_in_its_cell_and_in_a_note() -> None:
    data = _data()
    data["runs"] += [_run("epoll", 600, 25)]
    data["results"] = summarize(data["runs"], "asyncio-protocol")
    header, rows = report.table(data, "wrk")
    assert rows[0][2] == "400–600 noisy"
    notes = report.footnotes(data, "wrk")
    assert "epoll: noisy: its repetitions differ by more than 25% (req/s 400–600, CPU µs/req 25–25)" in notes
    assert report.FOOTNOTES["spread"] in report.format_text(data)


def test_table_refuses_names_it_does_not_have() -> None:
    with pytest.raises(KeyError, match="no load 'ab-close'"):
        report.table(_data(), "ab-close")
    with pytest.raises(KeyError, match="no results for 'uv'"):
        report.table(_data(), "wrk", ["epoll", "uv"])


def test_text_report_has_every_table_and_the_notes() -> None:
    text = report.format_text(_data())
    assert "Test CPU, 2 CPUs, Linux 6.1, CPython 3.11.7; server on CPU 0, load on CPU 1; median of 3" in text
    assert "blocking: 1 of 1 runs: starved (why)" in text
    assert "go-nethttp: skipped: go is not on PATH" in text
    assert report.FOOTNOTES["cpu"] in text


def test_importing_report_loads_neither_matplotlib_nor_the_project() -> None:
    code = ("import sys, benchmarks.report; "
            "bad = [m for m in sys.modules if m.startswith(('matplotlib', 'tinyloop'))]; print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stderr


# --- a real --quick run ---------------------------------------------------

def _importable(name: str) -> bool:
    try:
        stages.load(name)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One --quick run on up to two stages, the asyncio baseline, the C floor, and the stalling fake."""
    if shutil.which("ab") is None or shutil.which("wrk") is None:
        pytest.skip("ab and wrk are needed for a benchmark run")
    out = tmp_path_factory.mktemp("bench") / "latest.json"
    chosen_stages = [name for name in ("blocking", "epoll") if _importable(name)]
    peers = ["asyncio-protocol", "stall"] + (["c-epoll"] if shutil.which("cc") else [])
    marker = uuid.uuid4().hex
    env = {**os.environ, "TINYLOOP_BENCH_TEST": marker}
    # --no-realtime: this checks the plumbing, and servers at real-time
    # priority would take a core from whatever else shares the machine (or be
    # taken from by another real-time benchmark).  The tests that read this
    # run are marked alone: its pinned loads starved the asyncio baseline, and
    # slowed tornado's 0.1 s request-timeout test past its limit, when the
    # two ran side by side in CI.
    cmd = [sys.executable, "-m", "benchmarks.run", "--quick", "--no-realtime",
           "--stages", ",".join(chosen_stages) or "none", "--peers", ",".join(peers), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=QUICK_RUN_TIMEOUT, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"data": json.loads(out.read_text()), "out": out, "stdout": done.stdout, "marker": marker,
            "stages": chosen_stages, "peers": peers}


@pytest.mark.slow  # the quick_run tests share one whole quick run, ~45 s (the slow step runs them)
@pytest.mark.alone  # its loads pin both cores; beside another test, each disturbs the other
@pytest.mark.timeout(QUICK_RUN_TIMEOUT + 30)
def test_quick_run_writes_the_json_the_docs_read(quick_run: dict) -> None:
    data, servers = quick_run["data"], quick_run["stages"] + quick_run["peers"]
    assert report.load(quick_run["out"]) == data
    for key in ("schema", "date", "command", "machine", "tools", "pinning", "settings", "baseline",
                "loads", "servers", "runs", "results"):
        assert key in data, key
    assert data["settings"]["quick"] and data["settings"]["repeat"] == 1
    assert data["machine"]["cpus"] == os.cpu_count()
    assert data["tools"]["ab"].startswith("This is ApacheBench")
    assert data["pinning"]["enabled"] == (len(os.sched_getaffinity(0)) >= 2 and shutil.which("taskset") is not None)
    assert [load["name"] for load in data["loads"]] == ["ab-close", "ab-keepalive", "wrk"]
    assert len(data["runs"]) == 3 * len(servers)
    assert set(data["results"]) == {"ab-close", "ab-keepalive", "wrk"}
    for load, results in data["results"].items():
        assert set(results) == set(servers), load
    # A timestamped copy, and the plot beside the JSON.
    assert list((quick_run["out"].parent / "runs").glob("latest-*.json"))
    pytest.importorskip("matplotlib")
    assert quick_run["out"].with_suffix(".png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.alone
def test_quick_run_measures_the_baseline_and_its_ratios_are_one(quick_run: dict) -> None:
    data = quick_run["data"]
    assert data["baseline"] == "asyncio-protocol"
    for load in ("ab-close", "ab-keepalive", "wrk"):
        base = data["results"][load]["asyncio-protocol"]
        assert base["status"] == "ok", base
        assert base["rps"] > 0 and base["completed"] > 0 and base["p99_ms"] >= base["p50_ms"] > 0
        assert base["cpu_us_per_req"] > 0
        assert base["ratio"]["rps"] == 1.0
        # With one repetition, the median is that run's figure.
        run, = [r for r in data["runs"] if r["server"] == "asyncio-protocol" and r["load"] == load]
        assert base["rps"] == run["rps"] and base["cpu_us_per_req"] == run["cpu_us_per_req"]
    ab_close = data["results"]["ab-close"]["asyncio-protocol"]
    assert ab_close["completed"] == data["settings"]["requests"]["ab-close"]


@pytest.mark.slow
@pytest.mark.alone
def test_quick_run_gives_a_server_that_stops_answering_a_timeout_row(quick_run: dict) -> None:
    data = quick_run["data"]
    for load in ("ab-close", "ab-keepalive", "wrk"):
        assert data["results"][load]["stall"]["status"] == "timeout", load
        _, rows = report.table(data, load, ["stall"])
        assert rows == [["stall", "timeout", "—", "—", "—", "—", rows[0][-1]]]
    for run in data["runs"]:
        if run["server"] == "stall":
            assert run["seconds"] < 15, run  # ended by its time-out, not by a hang
    assert "STARVED" in quick_run["stdout"] or "blocking" not in quick_run["stages"]
    assert "TIMEOUT" in quick_run["stdout"]


@pytest.mark.slow  # shares the module's whole quick run (~45 s on 2 cores): the slow step runs it
@pytest.mark.alone
def test_quick_run_shows_blocking_cannot_take_100_keepalive_connections(quick_run: dict) -> None:
    if "blocking" not in quick_run["stages"]:
        pytest.skip("the blocking stage is not built")
    results = quick_run["data"]["results"]
    assert results["ab-close"]["blocking"]["status"] == "ok"
    assert results["ab-keepalive"]["blocking"]["status"] == "timeout"
    assert results["wrk"]["blocking"]["status"] == "starved"


@pytest.mark.slow  # shares the module's whole quick run (~45 s on 2 cores): the slow step runs it
def test_quick_run_leaves_no_process_behind(quick_run: dict) -> None:
    marker = f"TINYLOOP_BENCH_TEST={quick_run['marker']}".encode()
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes():
                    left.append((entry / "cmdline").read_bytes().replace(b"\0", b" "))
            except OSError:
                continue
    assert left == []


@pytest.mark.slow  # shares the module's whole quick run (~45 s on 2 cores): the slow step runs it
def test_report_cli_prints_the_saved_tables(quick_run: dict) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.report", str(quick_run["out"])],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for load in ("ab-close:", "ab-keepalive:", "wrk:"):
        assert load in done.stdout
    assert "asyncio-protocol" in done.stdout


def test_a_run_writes_under_the_ignored_local_directory_unless_told_reference() -> None:
    # Parse only: where a run would write, and that --reference is on purpose.
    parsed = run_module.build_parser().parse_args([])
    assert parsed.out is None and not parsed.reference
    assert run_module.LOCAL == ROOT / "benchmarks" / "results" / "local" / "latest.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(run_module.LOCAL)], cwd=ROOT)
    assert ignored.returncode == 0, "benchmarks/results/local/ must be ignored by git"
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--reference", "--quick"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode != 0 and "--reference" in done.stderr


def test_unknown_names_are_refused_with_the_choices() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--stages", "epoll,nope"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode != 0
    assert "unknown stage 'nope'" in done.stderr and "choose from: blocking, threaded" in done.stderr
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--peers", "apache"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert "unknown peer 'apache'" in done.stderr and "asyncio-protocol" in done.stderr


# --- the harness's output rule (benchmarks/harness/output.py) ---------------------

def _output_args(*argv: str) -> tuple:
    import argparse

    from benchmarks.harness import output
    parser = argparse.ArgumentParser(prog="x.py")
    parser.add_argument("--quick", action="store_true")
    output.add_arguments(parser, "x.json")
    return parser, parser.parse_args(list(argv))


def test_output_rule_local_by_default_reference_only_on_purpose(tmp_path: Path) -> None:
    from benchmarks.harness import output
    parser, args = _output_args()
    assert output.json_path(parser, args, "x.json") == ROOT / "benchmarks" / "results" / "local" / "x.json"
    parser, args = _output_args("--reference")
    assert output.json_path(parser, args, "x.json") == ROOT / "benchmarks" / "results" / "x.json"
    parser, args = _output_args("--out", str(tmp_path / "y.json"))
    assert output.json_path(parser, args, "x.json") == tmp_path / "y.json"


@pytest.mark.parametrize("argv", [("--reference", "--quick"), ("--reference", "--out", "/tmp/x.json"),
                                  ("--out", "benchmarks/results/x.json")])
def test_output_rule_refuses_to_write_the_reference_by_the_back_door(argv: tuple[str, ...], monkeypatch,
                                                                     capsys) -> None:
    from benchmarks.harness import output
    monkeypatch.chdir(ROOT)
    parser, args = _output_args(*argv)
    with pytest.raises(SystemExit) as stopped:
        output.json_path(parser, args, "x.json")
    assert stopped.value.code == 2
    assert "--reference" in capsys.readouterr().err


# --- every experiment's --quick run ------------------------------------------------

# ``run`` has its own quick run above (QUICK_RUN); these are the others this
# module's harness carries, each as a reader would first try it.
QUICK_EXPERIMENTS = {
    "echo": ("echo 1 KiB: ", "echo.json"),
    "micro": ("fastest loop per operation: ", "micro.json"),
    "idle": ("CPU µs per request, fewest -> most idle connections: ", "idle.json"),
    "fairness": ("p99 of fast requests beside a slow handler: ", "fairness.json"),
    "stack_cost": ("a hand-kept generator stack against yield from", "stack_cost.json"),
    "limits": ("at the descriptor limit: ", "limits.json"),
    "memory": ("KiB per idle keep-alive connection: ", "memory.json"),
    "realworld.notfaster_bench": ("load=", "notfaster.json"),  # nginx, PostgreSQL, wrk
    "realworld.tornado_bench": ("most req/s per handler: ", "tornado.json"),  # ab, wrk (PostgreSQL)
    "workers": ("2 workers on 2 cores", "workers.json"),  # wrk
    "trace_cost": ("trace_cost: instructions with the hooks off", "trace_cost.json"),  # valgrind: ~4 minutes
}


def _committed_results() -> dict[str, float]:
    """Every file of the committed results folder (not local/), with its modification time."""
    results = ROOT / "benchmarks" / "results"
    return {str(path): path.stat().st_mtime for path in results.rglob("*")
            if path.is_file() and "local" not in path.relative_to(results).parts}


# trace_cost's quick run is callgrind's (50 times slower than the CPU): on a
# loaded 2-core machine it took over 360 s.
QUICK_RUN_LIMITS = {"trace_cost": 900}


@pytest.mark.slow
@pytest.mark.timeout(max(QUICK_RUN_LIMITS.values()) + 40)
@pytest.mark.parametrize("name", sorted(QUICK_EXPERIMENTS))
def test_each_experiments_quick_run_works_and_touches_no_committed_result(name: str, tmp_path: Path) -> None:
    if shutil.which("ab") is None or shutil.which("cc") is None:
        pytest.skip("ab and a C compiler are needed for the experiments' servers and clients")
    if name == "micro":
        pytest.importorskip("pyperf")
    if (tool := {"workers": "wrk", "trace_cost": "valgrind"}.get(name)) and shutil.which(tool) is None:
        pytest.skip(f"{name} needs {tool}")
    conclusion, json_name = QUICK_EXPERIMENTS[name]
    before = _committed_results()
    out = tmp_path / json_name
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=QUICK_RUN_LIMITS.get(name, 360), cwd=ROOT)
    if done.returncode == 1 and "cannot run:" in done.stderr:  # a service not installed here
        pytest.skip(done.stderr.strip()[-300:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    # The one JSON head (benchmarks/harness/experiment.py), and the conclusion printed last.
    assert data["schema"] == 1 and {"cpu_model", "cpus", "python"} <= set(data["machine"])
    assert data["settings"]["quick"] is True and data["command"].startswith(f"python -m benchmarks.{name} --quick")
    assert done.stdout.strip().splitlines()[-1].startswith(conclusion), done.stdout[-500:]
    assert _committed_results() == before


# --- a run stopped by SIGTERM ----------------------------------------------

def test_building_the_parser_leaves_sigterm_alone_and_parsing_starts_the_run() -> None:
    code = ("import signal; from benchmarks.harness import experiment\n"
            "p = experiment.parser('x', None)\n"
            "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n"
            "p.parse_args(['--quick'])\n"
            "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr


def test_a_run_ended_by_sigterm_leaves_no_server_behind(tmp_path: Path) -> None:
    # kill(1), or a CI time-out, ends a run by SIGTERM: the harness turns it
    # into KeyboardInterrupt so the run's finally blocks stop its servers.
    psutil = pytest.importorskip("psutil")
    if shutil.which("ab") is None:
        pytest.skip("ab is needed for a benchmark run")
    cmd = [sys.executable, "-m", "benchmarks.run", "--quick", "--no-realtime", "--no-pin", "--no-plot",
           "--stages", "epoll", "--peers", "none", "--loads", "ab-close", "--out", str(tmp_path / "run.json")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        parent = psutil.Process(proc.pid)
        seen: list = []
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            seen = [child for child in parent.children(recursive=True) if "tinyloop" in " ".join(child.cmdline())]
            time.sleep(0.05)
        assert seen, "the run started no server within 30 s"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) != 0
        gone, alive = psutil.wait_procs(seen, timeout=10)
        assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
