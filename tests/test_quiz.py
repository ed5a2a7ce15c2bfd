# tests/test_quiz.py
#
# The "predict the order" quizzes (tinyloop/quiz/): every program prints, on
# every loop, exactly the order tinyloop/quiz/catalog.py declares (so a loop
# whose order changes fails here, and the book's answers stay true); every
# difference quotes KNOWN_DIFFERENCES.md; the command grades an answer given
# with --answer or on stdin.

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tinyloop.quiz import catalog, cli, runner, steps

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("quiz", catalog.QUIZZES, ids=lambda quiz: quiz.name)
def test_each_loop_prints_the_order_the_catalog_declares(quiz):
    outcomes = cli.run_on_loops(quiz, trace=False)
    ran = []
    for loop, outcome in outcomes.items():
        if outcome.unavailable:
            assert loop in ("uvloop", "uv"), f"{loop} must always be installed: {outcome.problem}"
            continue
        assert outcome.lines is not None, f"{quiz.name} on {loop}: {outcome.problem}"
        assert quiz.agrees(loop, outcome.lines), (
            f"{quiz.name} on {loop} printed {outcome.lines}, the catalog says {quiz.expected(loop)}")
        ran.append(loop)
    assert "asyncio" in ran and "aio" in ran


@pytest.mark.parametrize("name", [quiz.name for quiz in catalog.QUIZZES if quiz.differences])
def test_recording_a_run_changes_no_loop_s_order(name):
    quiz = catalog.get(name)
    for loop, outcome in cli.run_on_loops(quiz, trace=True).items():
        if outcome.unavailable:
            continue
        assert quiz.agrees(loop, outcome.lines), f"{loop} traced printed {outcome.lines}"
        assert outcome.steps, f"{loop}'s run was not recorded"
        printed = [step.strip()[2:] for step in outcome.steps if step.strip().startswith("| ")]
        assert tuple(printed) == outcome.lines, f"{loop}'s trace places the prints in another order"


def test_every_program_has_a_quiz_and_every_quiz_a_program():
    files = {path.stem for path in catalog.PROGRAMS.glob("*.py")} - {"__init__"}
    assert files == {quiz.name for quiz in catalog.QUIZZES}
    assert len(catalog.QUIZZES) >= 12


@pytest.mark.parametrize("quiz", catalog.QUIZZES, ids=lambda quiz: quiz.name)
def test_a_quiz_is_a_question_with_a_reason(quiz):
    assert quiz.title.endswith(("?", ".")), quiz.title
    assert quiz.chapter in {"callbacks", "coroutines", "asyncio", "libuv"}
    assert (ROOT / "chapters" / f"{quiz.chapter}.md").exists()
    source = quiz.source()
    assert "async def main()" in source and 'if __name__ == "__main__":' in source
    assert len(source.splitlines()) <= 40, "a quiz's program fits on a screen"
    # The letters are alphabetical, so they tell nothing of the order.
    assert list(quiz.choices.values()) == sorted(quiz.choices.values(), key=lambda line: (line.casefold(), line))
    for decoy in quiz.decoys:
        assert decoy not in quiz.order


def test_every_difference_quotes_known_differences_under_its_section():
    text = (ROOT / catalog.KNOWN_DIFFERENCES).read_text()
    sections = {}
    for chunk in text.split("\n## ")[1:]:
        heading, _, body = chunk.partition("\n")
        sections[heading.strip()] = " ".join(body.split())
    differing = [difference for quiz in catalog.QUIZZES for difference in quiz.differences]
    assert differing, "some quizzes show where the loops disagree"
    for difference in differing:
        if not difference.section:   # not ours: our own reason, for a loop with no entry there
            assert difference.loops == ("uvloop",) and difference.quote, difference
            continue
        assert difference.section in sections, difference.section
        assert " ".join(difference.quote.split()) in sections[difference.section], difference.quote
        assert set(difference.loops) <= set(catalog.LOOPS) - {"asyncio"}


def test_uv_has_a_quiz_where_it_differs_from_asyncio():
    assert any("uv" in difference.loops for quiz in catalog.QUIZZES for difference in quiz.differences)


@pytest.mark.parametrize("text, letters", [("c,b,a", "cba"), ("c b a", "cba"), ("CBA", "cba"), (" c;b ", "cb")])
def test_parse_answer_takes_letters_in_any_separator(text, letters):
    quiz = catalog.get("call_later_zero")
    assert cli.parse_answer(quiz, text) == tuple(quiz.choices[letter] for letter in letters)


@pytest.mark.parametrize("text, message", [("", "no letters"), ("c,b,z", "not a choice: z"),
                                           ("c,c,a", "appears twice")])
def test_parse_answer_refuses_what_is_not_an_order(text, message):
    with pytest.raises(ValueError, match=message):
        cli.parse_answer(catalog.get("call_later_zero"), text)


def test_a_decoy_left_out_is_the_right_answer():
    quiz = catalog.get("cancel_before_start")
    right = quiz.letters(quiz.order)
    assert len(right.split(",")) < len(quiz.choices)
    out = io.StringIO()
    assert cli.main(quiz.name, answer=right, loops=["asyncio"], out=out) == 0
    assert "Right: asyncio prints" in out.getvalue()


def _quiz_command(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "tinyloop", "quiz", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_list_names_every_quiz_one_a_line():
    done = _quiz_command("--list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [quiz.name for quiz in catalog.QUIZZES]


def test_a_right_answer_given_with_answer_is_graded_right():
    quiz = catalog.get("call_later_zero")
    done = _quiz_command(quiz.name, "--answer", quiz.letters(quiz.order))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Right: asyncio prints {quiz.letters(quiz.order)}." in done.stdout
    # Where the loops disagree, the orders are shown side by side with the reason.
    if "uvloop: skipped" not in done.stdout:
        assert "The loops disagree:" in done.stdout
        assert catalog.TIMERS_FIRST[1] in done.stdout


def test_a_wrong_answer_on_stdin_is_graded_wrong_and_named_for_the_loop_that_prints_it():
    quiz = catalog.get("io_vs_ready")
    uv_order = quiz.expected("uv")
    done = _quiz_command(quiz.name, "--loop", "asyncio", "--loop", "aio", stdin=quiz.letters(uv_order) + "\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"Not quite: you said {quiz.letters(uv_order)}, asyncio prints {quiz.letters(quiz.order)}." in done.stdout
    assert "That is the order of uvloop and uv" in done.stdout
    assert "Every loop that ran (asyncio, aio) prints" in done.stdout


def test_stdin_asks_again_after_a_bad_answer_and_enter_skips():
    quiz = catalog.get("first_step")
    done = _quiz_command(quiz.name, "--loop", "asyncio", stdin="x\n" + quiz.letters(quiz.order) + "\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not a choice: x" in done.stdout and "Right:" in done.stdout
    skipped = _quiz_command(quiz.name, "--loop", "asyncio", stdin="\n")
    assert skipped.returncode == 0 and "Right:" not in skipped.stdout and "Why:" in skipped.stdout


def test_bad_names_and_answers_are_usage_errors():
    assert _quiz_command("no_such_quiz").returncode == 2
    bad = _quiz_command("first_step", "--answer", "q")
    assert bad.returncode == 2 and "not a choice: q" in bad.stderr
    assert _quiz_command("--answer", "a,b").returncode == 2


def test_a_loop_that_is_not_installed_is_skipped_with_one_line(monkeypatch, capsys):
    monkeypatch.setitem(runner.FACTORIES, "uvloop", ("tinyloop_no_such_module", "new_event_loop"))
    status = runner.main(["uvloop", str(catalog.get("first_step").path)])
    assert status == runner.UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith("uvloop is not installed here: ") and err.count("\n") == 1


def test_a_traced_run_shows_each_printed_line_inside_the_callback_that_printed_it(tmp_path):
    # aio on the virtual clock: the same trace on every run.
    quiz = catalog.get("io_vs_ready")
    trace = tmp_path / "trace.json"
    assert runner.main(["--trace", str(trace), "--virtual-clock", "aio", str(quiz.path)]) == 0
    lines = steps.steps(json.loads(trace.read_text()))
    assert lines == [
        "wait -> 0 ready",
        "  step main -> awaits Future",
        "    | main waits",
        "wait -> 1 ready",            # the socket is ready; the reader queues behind call_soon's print
        "  print",
        "    | call_soon",
        "  on_readable",
        "    | reader",
        "wait -> 0 ready",
        "  step main -> done",
        "wait -> 0 ready",
        "  _run_until_complete_cb",
    ]


def test_the_virtual_clock_gives_the_same_trace_twice(tmp_path):
    quiz = catalog.get("sleep_zero")
    traces = []
    for name in ("one.json", "two.json"):
        assert runner.main(["--trace", str(tmp_path / name), "--virtual-clock", "aio", str(quiz.path)]) == 0
        traces.append(json.loads((tmp_path / name).read_text()))
    assert traces[0] == traces[1]
    with pytest.raises(ValueError, match="aio"):
        runner.run("asyncio", str(quiz.path), virtual_clock=True)


def test_the_command_shows_the_traces_side_by_side():
    quiz = catalog.get("sleep_zero")
    done = _quiz_command(quiz.name, "--answer", quiz.letters(quiz.order), "--loop", "aio", "--loop", "asyncio")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = done.stdout.split("What each loop did")[1]
    assert "step worker -> yields" in shown and "    | A 1" in shown


def test_a_batch_runs_each_program_on_a_loop_of_its_own_in_one_interpreter():
    differing = [quiz for quiz in catalog.QUIZZES if quiz.differences]
    for loop in ("aio", "uv"):
        outcomes = cli.run_batch(differing, loop)
        for quiz in differing:
            outcome = outcomes[quiz.name]
            if outcome.unavailable:
                continue
            assert quiz.agrees(loop, outcome.lines), f"{quiz.name} on {loop}: {outcome}"
            assert outcome.steps and any(step.strip().startswith("| ") for step in outcome.steps)
    missing = cli.run_batch(differing[:1], "uvloop")  # installed here: a batch of one
    assert missing[differing[0].name].lines is not None or missing[differing[0].name].unavailable
