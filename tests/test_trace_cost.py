"""python -m benchmarks.trace_cost runs every variant's workloads correctly (its counts are not tested).

The benchmark itself is run by a maintainer (it runs callgrind); here each
workload runs a few operations on each variant, the aio baseline is checked
to have no hook sites at all, and uv's is checked to be built from sources
in which no flag is tested (and, marked slow, to record nothing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from benchmarks import trace_cost, uv_variants
from tinyloop import stages
from tinyloop.trace.recorder import Recorder

ROOT = Path(__file__).resolve().parent.parent


def _skip_without_uv(loop_name: str, variant: str) -> None:
    if loop_name == "uv" and stages.get("uv").unavailable():
        pytest.skip(stages.get("uv").unavailable())
    if loop_name == "uv" and variant == "no hooks":
        pytest.skip("uv's build without hook sites is tested by test_the_uv_build_without_sites_records_nothing")


@pytest.mark.parametrize("variant", trace_cost.VARIANTS)
@pytest.mark.parametrize("loop_name", ["aio", "uv"])
def test_every_variant_runs_the_callback_chain(loop_name: str, variant: str) -> None:
    _skip_without_uv(loop_name, variant)
    loop = trace_cost.make_loop(loop_name, variant)
    instruments = loop._instrument.instruments if loop._instrument is not None else ()
    try:
        trace_cost.callbacks(loop, 20)
    finally:
        loop.close()
    if variant == "recorder":
        recorder = instruments[0]
        assert isinstance(recorder, Recorder) and recorder.recorded > 20


@pytest.mark.parametrize("variant", trace_cost.VARIANTS)
@pytest.mark.parametrize("loop_name", ["aio", "uv"])
def test_the_http_workload_answers_every_request(loop_name: str, variant: str) -> None:
    _skip_without_uv(loop_name, variant)
    loop = trace_cost.make_loop(loop_name, variant)
    answered: list[object] = []
    threads: list[threading.Thread] = []

    def start(port: int) -> None:
        threads.append(threading.Thread(target=load, args=(port,)))
        threads[0].start()

    def load(port: int) -> None:
        try:
            trace_cost.client(port, 25, timeout=20.0)
            answered.append(25)
        except Exception as error:  # handed to the test's thread
            answered.append(error)

    try:
        trace_cost.serve_one_connection(loop, start)
    finally:
        loop.close()
        for thread in threads:
            thread.join(30)
    assert answered == [25], "the server answered every request, then returned when the client closed"


def test_the_baseline_has_no_hook_sites() -> None:
    loop = trace_cost.NoHookSites()
    recorder = Recorder(loop.time)
    loop.add_instrument(recorder)
    try:
        trace_cost.callbacks(loop, 50)
    finally:
        loop.close()
    names = {event["name"] for event in recorder.events}
    assert names == {"run"}, "only run_forever's hooks are left: the iteration's are gone"


def test_the_baseline_is_the_loop_without_its_instrument_tests() -> None:
    """Its steps are rebuilt from the loop's own source: no copy to drift, no test left."""
    for name in ("_run_ready", "_compute_timeout", "_process_events", "_move_due_timers"):
        shipped = getattr(trace_cost.SelectorEventLoop, name)
        rebuilt = getattr(trace_cost.NoHookSites, name)
        assert "_instrument" in shipped.__code__.co_names, name
        assert "_instrument" not in rebuilt.__code__.co_names, name
        assert rebuilt.__code__.co_filename == shipped.__code__.co_filename
    loop = trace_cost.NoHookSites()
    loop.set_debug(True)  # the rebuilt _run_ready hands debug mode to aio's own (its super())
    try:
        trace_cost.callbacks(loop, 5)
    finally:
        loop.close()


def test_the_committed_table_is_rendered_from_the_committed_json_alone() -> None:
    results = ROOT / "benchmarks" / "results"
    data = json.loads((results / "trace_cost.json").read_text(encoding="utf-8"))
    assert trace_cost.render(data) == (results / "trace_cost.txt").read_text(encoding="utf-8")


def test_the_uv_copy_without_sites_tests_no_flag() -> None:
    changed = 0
    for path in sorted((ROOT / "tinyloop" / "uv").glob("*.p*")):
        if path.suffix not in (".pyx", ".pxd"):
            continue
        source = path.read_text()
        copy = uv_variants.without_sites(source)
        changed += copy != source
        assert len(copy.splitlines()) == len(source.splitlines())
        for number, line in enumerate(copy.splitlines(), 1):
            code = line.split("#")[0].strip()
            if code.startswith(("if ", "elif ", "while ")) and "instrumented" in code:
                pytest.fail(f"{path.name}:{number} still tests the flag: {line.strip()}")
    assert changed >= 3, "the uv sources have hook sites in several files, and the copy drops them"


@pytest.mark.slow
def test_the_uv_build_without_sites_records_nothing() -> None:
    if stages.get("uv").unavailable():
        pytest.skip(stages.get("uv").unavailable())
    program = (
        "from benchmarks import trace_cost as t, uv_variants\n"
        "uv_variants.use('no-sites')\n"
        "from tinyloop.trace.recorder import Recorder\n"
        "loop = t.make_loop('uv', 'recorder')\n"
        "recorder = loop._instrument.instruments[0]\n"
        "t.callbacks(loop, 50); loop.close()\n"
        "import tinyloop.uv._loop as m; assert 'no-sites' in m.__file__, m.__file__\n"
        "print(sorted({e['name'] for e in recorder.events}))\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.strip() == "['run']", "only run_forever's hooks are left (with sites: idle, wait, step...)"


def test_the_committed_counts_say_what_the_libuv_chapter_says() -> None:
    # libuv.md, under the table: "Off, the hooks cost little or nothing" (here: at most 5% over
    # no hooks, per request and per callback) and "a traced request costs several times an
    # untraced one" (here: the recorder's request at least three times the shipped one's).
    data = json.loads((ROOT / "benchmarks" / "results" / "trace_cost.json").read_text(encoding="utf-8"))
    text = " ".join((ROOT / "chapters" / "libuv.md").read_text(encoding="utf-8").split())
    assert "Off, the hooks cost little or nothing" in text
    assert "a traced request costs several times an untraced one" in text
    for loop, counts in data["counts"].items():
        for workload in ("http", "callbacks"):
            assert counts["off"][workload] <= 1.05 * counts["no hooks"][workload], (loop, workload)
        assert counts["recorder"]["http"] >= 3 * counts["off"]["http"], loop
