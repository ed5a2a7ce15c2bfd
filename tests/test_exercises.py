# tests/test_exercises.py
#
# The exercise machinery, end to end: the catalog, the checker (with real
# pytest subprocesses), the loop properties (on real servers), and the
# commands.  Then the promise the book makes for EVERY exercise in the
# catalog: the untouched starter fails its check, and the reference passes.
#
# The machinery is tested on a fixture exercise that lives in a temporary
# directory (a module with markers and a test file), so these tests do not
# depend on any chapter's exercise.

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

import tinyloop
from tinyloop._override import ENV
from tinyloop.exercises import catalog, checker, cli, markers, properties
from tinyloop.exercises.model import Exercise

# --- a fixture exercise -------------------------------------------------------

MODULE = '''\
# exercise_fixture.py: what the fixture exercise cuts its starter from
__all__ = ["add", "total"]


def add(a, b):
    # exercise fixture-add: begin
    return a + b
    # exercise fixture-add: end


def total(xs):
    result = 0
    for x in xs:
        # exercise fixture-add: begin
        result = add(result, x)
        # exercise fixture-add: end
    return result
'''

TESTS = '''\
import exercise_fixture


def test_add():
    assert exercise_fixture.add(2, 3) == 5, "add(2, 3) should be 5"


def test_total():
    assert exercise_fixture.total([1, 2, 3]) == 6
'''


@pytest.fixture
def exercise(tmp_path, monkeypatch) -> Exercise:
    """The fixture exercise; its module and tests live in ``tmp_path`` (the "repository")."""
    (tmp_path / "exercise_fixture.py").write_text(MODULE)
    (tmp_path / "test_fixture.py").write_text(TESTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return Exercise(name="fixture-add", chapter="fixtures", title="Add numbers",
                    module="exercise_fixture", instructions="Return the sum of a and b.",
                    tests=("test_fixture.py",))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "student" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def grade(exercise: Exercise, path: Path, **kw) -> checker.Report:
    return checker.check(exercise, path, root=path.parent.parent, quick=True, **kw)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


# --- the checker ---------------------------------------------------------------

def test_the_reference_passes(exercise, tmp_path):
    report = grade(exercise, write(tmp_path, "r.py", markers.reference(exercise)))
    assert report.passed, report.render()
    assert "ok    tests: 2 passed (test_fixture.py)" in report.render()
    assert report.render().endswith("\nPASSED")


def test_the_untouched_starter_is_not_written_yet(exercise, tmp_path):
    starter = markers.starter(exercise)
    report = grade(exercise, write(tmp_path, "s.py", starter))
    assert not report.passed
    lines = markers.unwritten_lines(starter, "fixture-add")
    assert f"FAIL  not written yet: lines {lines[0]}, {lines[1]} still raise " \
           "NotImplementedError" in report.render()
    assert report.render().endswith("\nFAILED")


def test_the_tests_themselves_see_an_unwritten_region(exercise, tmp_path):
    report = grade(exercise, write(tmp_path, "s.py", markers.starter(exercise)),
                   stop_when_unwritten=False)
    text = report.render()
    assert "FAIL  tests: 1 failed, 0 passed; stopped there (test_fixture.py)" in text  # -x
    stub = line_of(markers.starter(exercise), markers.placeholder("fixture-add"))
    assert (f"test_add (test_fixture)\n"
            f"          line {stub} of your file: not written yet (it raised NotImplementedError)"
            in text)


def test_a_wrong_answer_shows_the_failed_assertion(exercise, tmp_path):
    wrong = markers.reference(exercise).replace("return a + b", "return a - b")
    text = grade(exercise, write(tmp_path, "w.py", wrong)).render()
    assert "FAIL  tests: 1 failed, 0 passed; stopped there (test_fixture.py)" in text  # -x
    assert "add(2, 3) should be 5" in text and "AssertionError: add" not in text  # the message, as written


def test_an_exception_names_the_line_of_the_students_file(exercise, tmp_path):
    crash = markers.reference(exercise).replace("return a + b", "return a / 0")
    text = grade(exercise, write(tmp_path, "c.py", crash)).render()
    assert (f"test_add (test_fixture)\n"
            f"          line {line_of(crash, 'a / 0')} of your file: ZeroDivisionError" in text)


def test_a_syntax_error_is_reported_with_its_line(exercise, tmp_path):
    broken = markers.reference(exercise).replace("return a + b", "return (a + b")
    report = grade(exercise, write(tmp_path, "x.py", broken))
    assert report.steps[0].status == "FAIL"
    assert report.steps[0].text == (f"your file does not compile: line "
                                    f"{line_of(broken, '(a + b')}: '(' was never closed")
    assert report.steps[0].details == ["return (a + b", "       ^"]
    assert len(report.steps) == 1


def test_a_file_that_fails_on_import(exercise, tmp_path):
    bad = markers.reference(exercise) + "\nundefined_name\n"
    text = grade(exercise, write(tmp_path, "i.py", bad)).render()
    assert f"FAIL  your file fails when it is imported at line {line_of(bad, 'undefined_name')}" in text
    assert "NameError: name 'undefined_name' is not defined" in text


def test_the_wrong_file(exercise, tmp_path):
    text = grade(exercise, write(tmp_path, "o.py", "def add(a, b):\n    return a + b\n")).render()
    assert "FAIL  your file does not define total, which exercise_fixture defines" in text


def test_a_missing_file_is_a_usage_error(exercise, tmp_path):
    with pytest.raises(checker.CheckerError, match="-m tinyloop start fixture-add"):
        checker.check(exercise, tmp_path / "nothing.py", root=tmp_path)


def test_tests_that_do_not_exist_are_the_exercises_fault(exercise, tmp_path):
    lost = replace(exercise, tests=("test_nowhere.py",))
    text = grade(lost, write(tmp_path, "r.py", markers.reference(exercise))).render()
    assert "FAIL  the exercise's tests did not run: pytest test_nowhere.py" in text
    assert "tell your teacher" in text


def test_many_failures_still_fit_on_a_screen(exercise, tmp_path):
    (tmp_path / "test_fixture.py").write_text(TESTS + textwrap.dedent('''
        import pytest

        @pytest.mark.parametrize("n", range(30))
        def test_many(n):
            assert exercise_fixture.add(n, 1) == n + 1
        '''))
    wrong = markers.reference(exercise).replace("return a + b", "return a * b")
    text = grade(exercise, write(tmp_path, "w.py", wrong)).render()
    assert "FAIL  tests: 1 failed, 0 passed; stopped there (test_fixture.py)" in text  # -x
    assert len(text.splitlines()) <= 20
    assert max(map(len, text.splitlines())) <= 110


HANGING_TEST = '''\
import subprocess, sys, time
import exercise_fixture


def test_hangs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open("child.pid", "w") as f:
        f.write(str(child.pid))
    time.sleep(60)
'''


def test_a_hanging_test_fails_on_its_own_time_limit(exercise, tmp_path, monkeypatch):
    (tmp_path / "test_fixture.py").write_text(HANGING_TEST)
    monkeypatch.setattr(checker, "TEST_TIMEOUT", 1.0)
    text = grade(exercise, write(tmp_path, "r.py", markers.reference(exercise))).render()
    assert "FAIL  tests: 1 failed, 0 passed; stopped there (test_fixture.py)" in text
    assert "test_hangs (test_fixture)\n          still running after 1 s" in text


def test_a_run_past_its_time_limit_is_stopped_with_everything_it_started(exercise, tmp_path,
                                                                         monkeypatch):
    (tmp_path / "test_fixture.py").write_text(HANGING_TEST)
    monkeypatch.setattr(checker, "TESTS_TIMEOUT", 3.0)
    text = grade(exercise, write(tmp_path, "r.py", markers.reference(exercise))).render()
    assert "FAIL  the tests did not finish within 3 s" in text
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5.0
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                break  # killed, waiting for init to reap it
        except FileNotFoundError:
            break  # gone
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{pid}").exists(), "the test's child process outlived the check"


def test_the_checker_needs_a_source_checkout(tmp_path, monkeypatch):
    (tmp_path / "tinyloop").mkdir()
    monkeypatch.setattr(tinyloop, "__file__", str(tmp_path / "tinyloop" / "__init__.py"))
    with pytest.raises(checker.CheckerError, match="needs a source checkout"):
        checker.repository_root()
    monkeypatch.undo()
    assert (checker.repository_root() / "tests" / "test_exercises.py").is_file()


# --- loop properties, on real servers -----------------------------------------

# Two classic bugs in one server: select() with a zero timeout (a busy loop),
# and connections dropped from the table but never closed (an fd leak).
SPINNING_LEAKY_SERVER = '''\
import select
from tinyloop.http import HTTPConnection

leaked = []


def serve(listener):
    listener.setblocking(False)
    connections = {}
    while True:
        readable, _, _ = select.select([listener, *connections], [], [], 0)
        for sock in readable:
            if sock is listener:
                client, _ = listener.accept()
                connections[client] = HTTPConnection()
                continue
            try:
                data = sock.recv(65536)
                sock.sendall(connections[sock].receive_data(data))
            except OSError:
                data = b""
            if not data or connections[sock].should_close:
                leaked.append(connections.pop(sock) and sock)
'''


@pytest.fixture
def spinning_leaky(tmp_path) -> dict[str, str]:
    """The environment that makes stage ``threaded`` run SPINNING_LEAKY_SERVER."""
    path = tmp_path / "spinning_leaky.py"
    path.write_text(SPINNING_LEAKY_SERVER)
    return {ENV: f"tinyloop.baseline.threaded={path}"}


def measure(stage: str, *names: str, env=None) -> dict[str, properties.Result]:
    return {r.name: r for r in properties.check(stage, names, env=env, limits=properties.QUICK)}


def test_an_event_loop_has_all_four_properties():
    results = measure("epoll", *properties.PROPERTIES)
    assert all(r.passed for r in results.values()), results
    assert results["single_thread"].message == "1 thread served 20 clients at once"


def test_a_thread_per_connection_is_not_one_thread():
    result = measure("threaded", "single_thread")["single_thread"]
    assert not result.passed
    assert result.message.startswith("your server ran 21 threads while serving 20 clients")


def test_one_client_at_a_time_is_held_up_by_a_slow_client():
    result = measure("blocking", "slow_client")["slow_client"]
    assert not result.passed
    assert "only 0 of 20 quick GETs on other connections were answered within 2 s" in result.message


def test_busy_waiting_and_leaked_descriptors_are_measured(spinning_leaky):
    results = measure("threaded", "idle_cpu", "no_fd_growth", "single_thread", env=spinning_leaky)
    assert not results["idle_cpu"].passed
    assert "of CPU while idle for 0.5 s" in results["idle_cpu"].message
    assert "busy-waiting" in results["idle_cpu"].message
    assert not results["no_fd_growth"].passed
    assert "after 200 connections your server holds" in results["no_fd_growth"].message
    assert results["single_thread"].passed  # one thread it is, at least


def test_a_server_that_does_not_start(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('no luck')\n")
    result = measure("threaded", "idle_cpu", env={ENV: f"tinyloop.baseline.threaded={path}"})
    assert not result["idle_cpu"].passed
    assert result["idle_cpu"].message == "the server did not start: RuntimeError: no luck"


def test_the_checker_measures_the_stage_with_the_students_file(tmp_path):
    # The student's file replaces the threaded stage's module; a test that
    # passes with it, then the properties, which fail.
    (tmp_path / "test_serves.py").write_text(
        "import tinyloop.baseline.threaded as m\n\n"
        "def test_it_is_the_students():\n    assert hasattr(m, 'leaked')\n")
    spin = Exercise(name="spin", chapter="fixtures", title="Spin", module="tinyloop.baseline.threaded",
                    instructions="-", tests=("test_serves.py",), stage="threaded",
                    properties=("single_thread", "idle_cpu"))
    report = grade(spin, write(tmp_path, "spin.py", SPINNING_LEAKY_SERVER))
    statuses = [(step.status, step.text.partition(":")[0]) for step in report.steps]
    assert statuses[-3:] == [("ok", "tests"), ("ok", "single_thread"), ("FAIL", "idle_cpu")]
    assert not report.passed


def test_when_tests_fail_the_servers_own_traceback_is_shown(tmp_path):
    (tmp_path / "test_serves.py").write_text(
        "from tinyloop.testing import ServerProcess, http_get\n\n"
        "def test_get():\n"
        "    with ServerProcess('threaded') as server:\n"
        "        assert http_get(server.address)[0] == 200\n")
    crash = Exercise(name="crash", chapter="fixtures", title="Crash",
                     module="tinyloop.baseline.threaded", instructions="-",
                     tests=("test_serves.py",), stage="threaded")
    text = grade(crash, write(tmp_path, "crash.py", "def serve(listener):\n"
                              "    listener.accept()\n    raise ValueError('boom')\n")).render()
    assert "FAIL  tests: 1 failed, 0 passed; stopped there (test_serves.py)" in text
    assert "the threaded server, run with your file, raised an exception at line 3 of your " \
           "file; its traceback, your file's lines:\n" \
           "          line 3, in serve: raise ValueError('boom')\n          ValueError: boom" in text


# --- the catalog ----------------------------------------------------------------

def catalog_module(name: str, *exercises: Exercise) -> types.ModuleType:
    module = types.ModuleType(name)
    module.EXERCISES = list(exercises)  # type: ignore[attr-defined]
    return module


def an_exercise(name: str, chapter: str) -> Exercise:
    return Exercise(name=name, chapter=chapter, title=name, module="m", instructions="-",
                    tests=("tests",))


def test_the_catalog_orders_exercises_by_chapter():
    found = catalog.collect([
        catalog_module("catalog_x", an_exercise("z", "unknown-chapter"), an_exercise("c", "callbacks")),
        catalog_module("catalog_y", an_exercise("b", "readiness"), an_exercise("a", "readiness")),
        catalog_module("catalog_z", an_exercise("t", "baselines")),
    ])
    assert [e.name for e in found] == ["t", "b", "a", "c", "z"]


def test_two_exercises_with_one_name_are_an_error():
    with pytest.raises(catalog.CatalogError, match="declared twice: in catalog_x and in catalog_y"):
        catalog.collect([catalog_module("catalog_x", an_exercise("a", "readiness")),
                         catalog_module("catalog_y", an_exercise("a", "callbacks"))])


def test_a_malformed_catalog_is_an_error():
    with pytest.raises(catalog.CatalogError, match="must define EXERCISES"):
        catalog.collect([types.ModuleType("catalog_x")])
    with pytest.raises(catalog.CatalogError, match="is not an Exercise"):
        catalog.collect([catalog_module("catalog_x", "partial-writes")])  # type: ignore[arg-type]


def test_the_real_catalog_loads():
    exercises = catalog.exercises()
    assert len({e.name for e in exercises}) == len(exercises)
    for chapter in catalog.chapters():
        assert catalog.by_chapter(chapter)
    assert catalog.by_chapter("no-such-chapter") == []


# --- the commands ---------------------------------------------------------------

@pytest.fixture
def commands(exercise, tmp_path, monkeypatch) -> Exercise:
    """The commands, seeing only the fixture exercise, run in ``tmp_path/student``."""
    monkeypatch.setattr(catalog, "exercises", lambda: (exercise,))
    monkeypatch.setattr(checker, "repository_root", lambda: tmp_path)
    (tmp_path / "student").mkdir()
    monkeypatch.chdir(tmp_path / "student")
    return exercise


def test_exercises_lists_them_by_chapter(commands, capsys):
    assert cli.list_exercises() == 0
    assert capsys.readouterr().out.startswith("fixtures:\n  fixture-add  Add numbers\n")


def test_start_writes_the_starter_and_says_what_to_do(commands, capsys):
    assert cli.start("fixture-add", None) == 0
    text = Path("fixture-add.py").read_text()
    assert text == markers.starter(commands)
    out = capsys.readouterr().out
    assert out.startswith("wrote fixture-add.py\n")
    assert "Return the sum of a and b." in out
    lines = markers.unwritten_lines(text, "fixture-add")
    assert f"NotImplementedError on lines {lines[0]}, {lines[1]}, then run:" in out
    # The command names this interpreter as the reader can type it.
    assert out.endswith(f"    {markers.python_command()} -m tinyloop check fixture-add\n")
    # Again: the file is the starter still, so that is fine.
    assert cli.start("fixture-add", None) == 0
    assert "fixture-add.py is already the starter file" in capsys.readouterr().out


def test_start_never_overwrites_work(commands, capsys):
    Path("mine.py").write_text("my work\n")
    assert cli.start("fixture-add", "mine.py") == 2
    assert "mine.py exists and is not the untouched starter; not overwriting" in capsys.readouterr().err
    assert Path("mine.py").read_text() == "my work\n"


def test_start_into_a_missing_directory_is_a_usage_error(commands, capsys):
    assert cli.start("fixture-add", "no/such/dir/x.py") == 2
    assert "cannot write no/such/dir/x.py: No such file or directory" in capsys.readouterr().err


def test_check_exit_codes(commands, capsys):
    assert cli.start("fixture-add", None) == 0
    assert cli.check("fixture-add", None) == 1
    assert "not written yet" in capsys.readouterr().out
    Path("done.py").write_text(markers.reference(commands))
    assert cli.check("fixture-add", "done.py") == 0
    assert capsys.readouterr().out.endswith("PASSED\n")
    assert cli.check("fixture-add", "absent.py") == 2
    assert "there is no file" in capsys.readouterr().err
    assert cli.check("fixture-ad", None) == 2
    assert "did you mean 'fixture-add'?" in capsys.readouterr().err


# --- every exercise in the book ---------------------------------------------------

@pytest.mark.slow  # three checker runs per exercise, 10-45 s each (scripts/test.sh's slow step)
@pytest.mark.parametrize("exercise", catalog.exercises(), ids=lambda e: e.name)
def test_the_starter_fails_and_the_reference_passes(exercise, tmp_path):
    starter = write(tmp_path, f"{exercise.name}.py", markers.starter(exercise))
    solution = write(tmp_path, "solution.py", markers.reference(exercise))
    report = checker.check(exercise, starter)
    assert report.steps[-1].status == "FAIL" and "not written yet" in report.render()
    # The exercise's tests must catch the unwritten region on their own, too.
    # Both checks are subprocesses: run them side by side.
    with ThreadPoolExecutor(2) as pool:
        on_starter = pool.submit(checker.check, exercise, starter, quick=True,
                                 stop_when_unwritten=False)
        on_solution = pool.submit(checker.check, exercise, solution, quick=True)
        report = on_starter.result()
        assert not report.passed, "the tests pass on the untouched starter:\n" + report.render()
        assert any(s.status == "FAIL" and s.text.startswith("tests:") for s in report.steps), \
            report.render()
        report = on_solution.result()
    assert report.passed, report.render()
    # compiled or built, written, defines, its own tests, the wider suites, each property
    assert len(report.steps) == 4 + bool(checker.own_test_arguments(exercise)) + len(exercise.properties)


def test_commands_name_an_interpreter_that_runs_tinyloop(tmp_path, monkeypatch):
    # "python" only when it is this interpreter (the environment is active);
    # otherwise a path that works from where the reader stands.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no python on PATH at all
    assert markers.python_command() == sys.executable
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), str(tmp_path)]))
    if shutil.which("python") and Path(shutil.which("python")).parent == Path(sys.executable).parent:
        assert markers.python_command() == "python"
    assert markers.check_command("a", None, "/x/y/python") == "/x/y/python -m tinyloop check a"


# --- the mutation measurement (scripts/mutation.py) ----------------------------------

def _mutation_module():
    pytest.importorskip("cosmic_ray")
    import importlib.util
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("mutation", root / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_mutation_operators_of_ours_make_valid_python(tmp_path):
    from cosmic_ray import plugins
    from cosmic_ray.mutating import use_mutation
    mutation = _mutation_module()
    plugins.OPERATOR_PROVIDERS.setdefault("tinyloop", mutation._Provider())
    source = tmp_path / "m.py"
    original = "def f(x):\n    y = x + 1\n    g(y)\n    return y\n"
    made = []
    for name, count in (("DeleteStatement", 3), ("ReturnNone", 1)):
        operator = plugins.get_operator(f"tinyloop/{name}")()
        for occurrence in range(count):
            source.write_text(original)
            with use_mutation(source, operator, occurrence) as (_, mutated):
                compile(mutated, "m.py", "exec")
                made.append(mutated)
    assert "    pass\n    g(y)" in made[0] and "    return None\n" in made[3]


def test_every_equivalent_mutant_names_a_line_of_its_exercises_region():
    # A line renamed in the reference would leave a stale entry: the mutant
    # would then be counted as a survivor, silently.
    mutation = _mutation_module()
    for name, entries in mutation.EQUIVALENT.items():
        exercise = catalog.get(name)
        text = markers.source_path(exercise.module).read_text()
        lines = text.splitlines()
        region = {lines[i].strip() for r in markers.find_regions(text) if r.name == name
                  for i in range(r.begin, r.end - 1)}
        for operator, code, reason in entries:
            assert code in region, f"{name}: {code!r} is not a line of its region"
            assert reason and operator.count("/") == 1
