"""The wide step's narrowing (tinyloop/exercises/reach.py): which tests run an exercise's code.

reach.json is measured (``python -m tinyloop.exercises.reach``); these tests
keep it honest: an entry whose region changed since is stale and fails here,
and the checker never runs fewer tests than a current entry allows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tinyloop.exercises import catalog, checker, markers, reach

PYTHON_EXERCISES = [e for e in catalog.exercises() if not e.extension]


@pytest.mark.parametrize("exercise", PYTHON_EXERCISES, ids=lambda e: e.name)
def test_every_python_exercise_has_an_entry_measured_on_its_current_region(exercise):
    entry = reach.load().get(exercise.name)
    command = f"python -m tinyloop.exercises.reach {exercise.name}"
    assert entry is not None, f"{exercise.name} has no entry in reach.json: run `{command}`"
    assert entry["region"] == reach.region_digest(exercise), (
        f"{exercise.name}'s region changed since its reach was measured (the checker runs every "
        f"wide test meanwhile): run `{command}`")
    assert entry["reached"] > 0 and entry["reached"] + len(entry["unreached"]) == entry["tests"]


def test_instrument_puts_a_hit_first_in_every_region_and_the_file_still_compiles():
    exercise = catalog.get("transport-write")  # two regions, in two methods
    text = markers.reference(exercise)
    instrumented = reach.instrument(text, exercise.name)
    compile(instrumented, "instrumented.py", "exec")
    lines = instrumented.splitlines()
    regions = [r for r in markers.find_regions(instrumented) if r.name == exercise.name]
    assert len(regions) == 2
    for region in regions:
        assert lines[region.begin] == f'{region.indent}__import__("tinyloop.exercises.reach", ' \
                                      f'fromlist=["hit"]).hit({exercise.name!r})'
    # Last, module level: the hits file opened on load, not first when the
    # process may be out of descriptors (the accept back-off's region).
    assert lines[-1] == '__import__("tinyloop.exercises.reach", fromlist=["prepare"]).prepare()'
    assert len(lines) == len(text.splitlines()) + 3


def test_a_hit_is_recorded_by_a_process_that_ran_out_of_descriptors(tmp_path):
    # The region of aio-accept-backoff runs only after accept() failed with
    # EMFILE: the hits file must already be open then.
    hits = tmp_path / "hits"
    program = (
        "import resource, socket\n"
        "from tinyloop.exercises import reach\n"
        "reach.prepare()\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (32, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "held = []\n"
        "try:\n"
        "    while True:\n"
        "        held.append(socket.socket())\n"
        "except OSError:\n"
        "    pass\n"
        "reach.hit('x')\n")
    done = subprocess.run([sys.executable, "-c", program], env={**os.environ, "TINYLOOP_REACH_HITS": str(hits)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert len(hits.read_text().split()) == 1


def test_hits_are_placed_in_the_test_that_ran_then():
    tests = [{"id": "a", "start": 1.0, "end": 2.0, "hits": 0},
             {"id": "b", "start": 2.5, "end": 3.0, "hits": 0},
             {"id": "c", "start": 3.0, "end": 4.0, "hits": 2},
             {"id": "d", "start": 4.5, "end": 5.0, "hits": 0},
             {"id": "e", "start": 6.0, "end": 7.0, "hits": 0}]
    assert reach.attribute(tests, []) == {"c"}  # in-process hits
    tests[4]["failed"] = True  # it may have stopped before the region
    assert reach.attribute(tests, []) == {"c", "e"}
    tests[4]["failed"] = False
    assert reach.attribute(tests, [1.5]) == {"a", "c"}  # a server's hit inside a's span
    assert reach.attribute(tests, [4.2]) == {"c", "d"}  # between two tests: both
    assert reach.attribute(tests, [0.5, 7.5]) == {"a", "c", "e"}  # before the first, after the last


def test_the_wide_step_drops_only_tests_seen_not_to_reach_and_everything_when_stale():
    exercise = catalog.get("transport-write")
    data = {exercise.name: {"region": reach.region_digest(exercise), "unreached": ["t::x", "t::y"]}}
    assert reach.selected(exercise, ["t::x", "t::new", "t::z"], data) == ["t::new", "t::z"]
    data[exercise.name]["region"] = "0" * 64  # measured on another region: not to be trusted
    assert reach.selected(exercise, ["t::x", "t::z"], data) == ["t::x", "t::z"]
    assert reach.selected(exercise, ["t::x"], {}) == ["t::x"]  # never measured


def test_the_plugin_deselects_the_unreached_and_puts_the_http_suite_last():
    exercise = catalog.get("transport-write")
    arguments = checker.wider_test_arguments(exercise)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           *checker.REACH_OPTIONS, exercise.name, *arguments],
                          capture_output=True, text=True, timeout=300, check=False)
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0 and collected, done.stdout + done.stderr
    unreached = set(reach.load()[exercise.name]["unreached"])
    assert unreached and not unreached & set(collected)
    ranks = [reach._rank(node) for node in collected]
    assert ranks == sorted(ranks) and ranks[-1] == 2


def test_the_per_stage_suites_run_each_test_on_the_exercises_own_stage_only():
    # The limits tests and the HTTP suite ask every stage's server the same:
    # each test runs on the stage of the exercise, whatever -k selects.
    exercise = catalog.get("aio-accept-backoff")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           *checker.REACH_OPTIONS, exercise.name, "tests/test_limits.py",
                           "tests/test_servers.py", "-k", "aio or uv"],
                          capture_output=True, text=True, timeout=300, check=False)
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0 and collected, done.stdout + done.stderr
    assert all(line.endswith("[aio]") for line in collected), collected
    names = [line.partition("[")[0] for line in collected]
    assert len(names) == len(set(names))


def test_the_wide_step_collects_then_waits_for_its_go(tmp_path):
    # The checker starts the wide step while the exercise's own tests run:
    # it must run no test before the go file exists, and end when told.
    (tmp_path / "test_one.py").write_text("def test_one():\n    open('ran', 'w').close()\n")
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "tinyloop.exercises.reach", f"--tinyloop-wait={go}", "test_one.py"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(3.0)
        assert proc.poll() is None and not (tmp_path / "ran").exists(), "a test ran before the go"
        go.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and (tmp_path / "ran").exists(), out


@pytest.mark.slow  # the whole wide suite of one exercise, about 10 s
def test_a_servers_hits_reach_the_log():
    # edge-triggered's code runs only in the epoll-et server processes that
    # the HTTP suite starts: every reach it finds came through the hits file.
    exercise = catalog.get("edge-triggered")
    entry = reach.compute(exercise, checker.repository_root())
    assert entry["reached"] >= entry["tests"] - 2 and entry["tests"] >= 10, entry
