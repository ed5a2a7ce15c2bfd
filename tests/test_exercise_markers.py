# tests/test_exercise_markers.py
#
# The marker language (tinyloop/exercises/markers.py) on small sources, and
# the book's own markers: every region in tinyloop/ belongs to a catalog
# exercise of the same module, every exercise has a region, and every
# starter and reference compiles.

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import tinyloop
from tinyloop import stages
from tinyloop.exercises import catalog, markers
from tinyloop.exercises.markers import MarkerError, find_regions
from tinyloop.exercises.model import Exercise

PACKAGE = Path(tinyloop.__file__).parent
ROOT = PACKAGE.parent


def regions(source: str) -> list[tuple[str, int, int, str]]:
    return [(r.name, r.begin, r.end, r.indent) for r in find_regions(textwrap.dedent(source))]


def error(source: str) -> str:
    with pytest.raises(MarkerError) as info:
        find_regions(textwrap.dedent(source), "f.py")
    return str(info.value)


# --- finding regions ---------------------------------------------------------

def test_a_region_in_a_function_body():
    assert regions("""\
        def f(x):
            y = x
            # exercise double: begin
            y = y * 2
            # exercise double: end
            return y
        """) == [("double", 3, 5, "    ")]


def test_several_regions_of_one_and_of_two_exercises():
    found = regions("""\
        # exercise a: begin
        x = 1
        # exercise a: end
        def f():
            # exercise b-2: begin
            return 2
            # exercise b-2: end
        # exercise a: begin
        y = 3
        # exercise a: end
        """)
    assert [(name, begin) for name, begin, _, _ in found] == [("a", 1), ("b-2", 5), ("a", 8)]


def test_no_markers_no_regions():
    assert regions("x = 1  # exercise a: begin is only a trailing comment\n") == []


def test_marker_text_in_a_string_is_not_a_marker():
    assert regions('''\
        def f():
            """Mark it like this:
            # exercise a: begin
            """
        ''') == []


def test_a_region_may_hold_compound_statements_and_comments():
    assert regions("""\
        def f(sock):
            # exercise a: begin
            # a comment first
            try:
                n = sock.send(b"x")
            except BlockingIOError:
                return 0
            else:
                return n
            # exercise a: end
        """) == [("a", 2, 10, "    ")]


def test_a_region_at_the_end_of_a_loop_body():
    assert regions("""\
        while True:
            x = 1
            # exercise a: begin
            if x:
                break
            # exercise a: end
        """) == [("a", 3, 6, "    ")]


@pytest.mark.parametrize("marker", ["#exercise a: begin", "# exercise a begin",
                                    "# Exercise a: Begin", "# exercise A_B: begin",
                                    "# exercise a:  end"])
def test_a_misspelt_marker_is_an_error(marker):
    assert "malformed marker" in error(f"x = 1\n{marker}\ny = 2\n")


def test_begin_without_end():
    assert error("# exercise a: begin\nx = 1\n") == "f.py:1: exercise a begins here and never ends"


def test_end_without_begin():
    assert "no region is open" in error("x = 1\n# exercise a: end\n")


def test_regions_do_not_nest():
    message = error("""\
        # exercise a: begin
        x = 1
        # exercise b: begin
        y = 2
        # exercise b: end
        # exercise a: end
        """)
    assert message.startswith("f.py:3:") and "do not nest" in message


def test_the_end_must_name_the_open_region():
    assert "the open region is exercise a" in error("# exercise a: begin\nx = 1\n# exercise b: end\n")


def test_both_markers_at_one_indentation():
    assert "indentation" in error("""\
        if True:
            # exercise a: begin
            x = 1
        # exercise a: end
        """)


def test_an_empty_region_is_an_error():
    assert "no statement" in error("# exercise a: begin\n# nothing here\n# exercise a: end\n")


def test_a_region_must_not_cut_a_statement_in_half():
    assert "cuts the statement on lines 3-7" in error("""\
        x = 1
        # exercise a: begin
        if x:
            y = 1
        # exercise a: end
        else:
            z = 2
        """)


def test_a_region_inside_an_expression_is_an_error():
    assert "inside brackets" in error("""\
        x = f(
            # exercise a: begin
            1,
            # exercise a: end
        )
        """)


def test_the_statements_must_be_at_the_markers_indentation():
    assert "indentation" in error("""\
        def f():
        # exercise a: begin
            return 1
        # exercise a: end
        """)


def test_invalid_python_is_a_syntax_error():
    with pytest.raises(SyntaxError):
        find_regions("# exercise a: begin\nx = (\n# exercise a: end\n")


# --- cutting starters and references -----------------------------------------

SOURCE = '''\
#!/usr/bin/env python3
# fixture.py: one module with two exercises

__all__ = ["add", "total"]


def add(a, b):
    # exercise add: begin
    return a + b
    # exercise add: end


def total(xs):
    result = 0
    for x in xs:
        # exercise add: begin
        result = add(result, x)
        # exercise add: end
    return result


def scale(xs, k):
    # exercise scale: begin
    return [x * k for x in xs]
    # exercise scale: end
'''


@pytest.fixture
def fixture_exercise(tmp_path, monkeypatch) -> Exercise:
    (tmp_path / "marker_fixture.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return Exercise(name="add", chapter="fixtures", title="Add two numbers",
                    module="marker_fixture", instructions="Return the sum of a and b.",
                    tests=("test_marker_fixture.py",))


def body(text: str) -> str:
    """A cut file without its header (which ends at the first blank line after line 2)."""
    lines = text.splitlines(keepends=True)
    end = lines.index("\n", 2)
    return lines[0] + "".join(lines[end + 1:])


def test_the_starter_replaces_every_region_and_keeps_its_markers(fixture_exercise):
    text = markers.starter(fixture_exercise)
    stub = markers.placeholder("add")
    assert body(text) == SOURCE.replace(
        "    # exercise add: begin\n    return a + b\n",
        f"    # exercise add: begin\n    {stub}\n").replace(
        "        # exercise add: begin\n        result = add(result, x)\n",
        f"        # exercise add: begin\n        {stub}\n").replace(
        "    # exercise scale: begin\n", "").replace("    # exercise scale: end\n", "")
    assert markers.unwritten_lines(text, "add") == [
        i for i, line in enumerate(text.splitlines(), 1) if stub in line]
    assert len(markers.unwritten_lines(text, "add")) == 2
    compile(text, "starter.py", "exec")


def test_the_reference_keeps_the_solution_and_drops_other_exercises_markers(fixture_exercise):
    text = markers.reference(fixture_exercise)
    assert body(text) == SOURCE.replace("    # exercise scale: begin\n", "").replace(
        "    # exercise scale: end\n", "")
    assert markers.unwritten_lines(text, "add") == []


def test_the_header_names_the_exercise_and_the_check_command(fixture_exercise):
    text = markers.starter(fixture_exercise)
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env python3"  # a shebang stays first
    assert lines[1] == "# Exercise add (chapter fixtures): Add two numbers"
    assert "#     python -m tinyloop check add" in lines
    assert "# Return the sum of a and b." in lines
    other = markers.starter(fixture_exercise, "work/mine.py")
    assert "#     python -m tinyloop check add work/mine.py" in other.splitlines()


def test_a_module_without_the_exercise_is_an_error(fixture_exercise):
    from dataclasses import replace
    with pytest.raises(MarkerError, match="no region of exercise nope"):
        markers.starter(replace(fixture_exercise, name="nope"))


def test_the_check_command():
    assert markers.check_command("a") == "python -m tinyloop check a"
    assert markers.check_command("a", "./a.py") == "python -m tinyloop check a"
    assert markers.check_command("a", "b.py") == "python -m tinyloop check a b.py"
    assert markers.check_command("a", "my work.py") == "python -m tinyloop check a 'my work.py'"


# --- the book's own markers and catalog --------------------------------------

def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_every_marker_belongs_to_an_exercise_of_its_module():
    known = {e.name: e for e in catalog.exercises()}
    for path, region in markers.find_all(PACKAGE):
        where = f"{path.relative_to(ROOT)}:{region.begin}"
        assert region.name in known, f"{where}: exercise {region.name} is in no catalog"
        assert known[region.name].module == module_of(path), (
            f"{where}: exercise {region.name} is declared for module "
            f"{known[region.name].module}, so this region would never be cut")


@pytest.mark.parametrize("exercise", catalog.exercises(), ids=lambda e: e.name)
def test_every_exercise_has_a_region_tests_and_a_stage_that_exist(exercise):
    path = markers.source_path(exercise.module)
    assert exercise.name in {r.name for r in find_regions(path.read_text(), str(path))}
    assert exercise.tests, "an exercise needs tests to grade it"
    paths = [a.partition("::")[0] for a in exercise.tests if a.startswith("tests/")]
    assert paths, f"{exercise.name}: name its test files (tests/...)"
    for path in paths:
        assert (ROOT / path).exists(), f"{exercise.name}: no {path} in the repository"
    if exercise.stage is not None:
        stages.get(exercise.stage)


@pytest.mark.parametrize("exercise", catalog.exercises(), ids=lambda e: e.name)
def test_every_starter_and_reference_compiles(exercise):
    assert markers.unwritten_lines(markers.starter(exercise), exercise.name)
    # The reference is the module itself, comments aside: what passes the
    # stage's own tests is what a student is compared with.
    module = markers.source_path(exercise.module).read_text()
    if exercise.extension:
        # Cython: no compile() here (the checker's build compiles it); the
        # reference must be the module's code line for line.
        def code(text):
            return [line for line in text.splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
        assert code(markers.reference(exercise)) == code(module)
        return
    for text in (markers.starter(exercise), markers.reference(exercise)):
        compile(text, f"{exercise.name}.py", "exec")
    assert ast.dump(ast.parse(markers.reference(exercise))) == ast.dump(ast.parse(module))
