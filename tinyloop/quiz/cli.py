# tinyloop/quiz/cli.py
"""``python -m tinyloop quiz [NAME] [--list] [--answer LETTERS]``: predict the order, then see it.

For each quiz: show the program and the lines it prints (lettered), ask for
their order (``--answer "b,a,c"``, or a line on stdin; an empty line or end
of input skips), run the program on every loop (tinyloop/quiz/runner.py, a
subprocess each, with a timeout), grade the answer against asyncio's order,
and where the loops disagree show their orders side by side with the
KNOWN_DIFFERENCES entry that explains it.  Each run is recorded
(``runner --trace``) on the loops that have instrument hooks, and the
traces are shown side by side as text (tinyloop/quiz/steps.py): the
iterations, the callbacks each ran, and where each line was printed.

Rules this file keeps:
  * What a loop prints is observed, never assumed: the orders shown are the
    ones the subprocesses printed.  If one differs from the catalog's, the
    output says so (the catalog is then out of date, or the loop changed).
  * A loop that is not installed is skipped with one line, not an error.
  * Exit status: 0 when every answer given was right (or skipped), 1 when
    one was wrong, 2 for a usage error (an unknown quiz, an answer that is
    not an order of the choices), 130 after Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import tinyloop
from tinyloop.quiz import runner, steps
from tinyloop.quiz.catalog import KNOWN_DIFFERENCES, LOOPS, QUIZZES, Quiz, get

__all__ = ["Outcome", "list_quizzes", "main", "parse_answer", "run_batch", "run_on", "run_on_loops",
           "side_by_side"]

DEFAULT_TIMEOUT = 30.0  # seconds per loop; a quiz program runs in well under one


@dataclass(frozen=True)
class Outcome:
    """What one loop did with a quiz's program.

    ``lines`` is what it printed, in order, when it ran to the end; else
    None and ``problem`` says why in one line (not installed, timed out,
    failed with its last line of stderr).  ``steps`` is its trace as
    text (tinyloop/quiz/steps.py), or None when the loop has no hooks.
    """

    loop: str
    lines: tuple[str, ...] | None
    problem: str = ""
    unavailable: bool = False
    steps: tuple[str, ...] | None = None


def run_on(quiz: Quiz, loop: str, timeout: float = DEFAULT_TIMEOUT, trace: bool = True) -> Outcome:
    """Run ``quiz``'s program on ``loop`` in a subprocess; never raises for the program's sake.

    ``timeout`` is in seconds; ``trace`` records the run (``Outcome.steps``).
    The child imports this same tinyloop (its parent directory leads
    PYTHONPATH), whether installed or a checkout.
    """
    env = dict(os.environ)
    root = str(Path(tinyloop.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="tinyloop-quiz-") as scratch:
        path = Path(scratch) / "trace.json"
        command = [sys.executable, "-m", "tinyloop.quiz.runner", *(["--trace", str(path)] if trace else []),
                   loop, str(quiz.path)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return Outcome(loop, None, f"timed out after {timeout:g} s")
        recorded = tuple(steps.steps(json.loads(path.read_text()))) if path.exists() else None
    if done.returncode == runner.UNAVAILABLE:
        return Outcome(loop, None, done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                       else f"{loop} is not installed here", unavailable=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no message"
        return Outcome(loop, None, f"failed (exit status {done.returncode}): {last}")
    return Outcome(loop, tuple(done.stdout.splitlines()), steps=recorded)


def run_batch(quizzes: Sequence[Quiz], loop: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Outcome]:
    """Run and record ``quizzes`` on ``loop``, all in one subprocess (runner --batch); quiz name -> Outcome.

    Quicker than :func:`run_on` per quiz when many are run (the book does),
    at the price of one interpreter for all of them.  ``timeout`` is in
    seconds, for the whole batch.
    """
    env = dict(os.environ)
    root = str(Path(tinyloop.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="tinyloop-quiz-") as scratch:
        command = [sys.executable, "-m", "tinyloop.quiz.runner", "--batch", scratch, loop,
                   *(str(quiz.path) for quiz in quizzes)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {quiz.name: Outcome(loop, None, f"timed out after {timeout:g} s") for quiz in quizzes}
        if done.returncode != 0:
            unavailable = done.returncode == runner.UNAVAILABLE
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit status {done.returncode}"
            return {quiz.name: Outcome(loop, None, last, unavailable=unavailable) for quiz in quizzes}
        outcomes = {}
        for quiz in quizzes:
            base = Path(scratch) / quiz.name
            if (base.with_suffix(".err")).exists():
                outcomes[quiz.name] = Outcome(loop, None, "failed: " + base.with_suffix(".err").read_text().strip())
                continue
            lines = tuple(base.with_suffix(".out").read_text().splitlines())
            trace = base.with_suffix(".json")
            recorded = tuple(steps.steps(json.loads(trace.read_text()))) if trace.exists() else None
            outcomes[quiz.name] = Outcome(loop, lines, steps=recorded)
        return outcomes


def run_on_loops(quiz: Quiz, loops: Sequence[str] = LOOPS, timeout: float = DEFAULT_TIMEOUT,
                 trace: bool = True) -> dict[str, Outcome]:
    """:func:`run_on` for each of ``loops``, at the same time; loop -> Outcome, in ``loops``' order."""
    with ThreadPoolExecutor(max_workers=max(1, len(loops))) as pool:
        futures = {loop: pool.submit(run_on, quiz, loop, timeout, trace) for loop in loops}
        return {loop: future.result() for loop, future in futures.items()}


def parse_answer(quiz: Quiz, text: str) -> tuple[str, ...]:
    """The lines a reader's answer names, in order: ``"b,a,c"``, ``"b a c"`` or ``"bac"``.

    Letters are ``quiz.choices``' (case does not matter); leave out a line
    you think is never printed.  Raises ValueError, with a message to show,
    for an unknown letter, a repeated one, or no letter at all.
    """
    letters = [letter for letter in re.split(r"[\s,;]+|(?<=\w)(?=\w)", text.strip().lower()) if letter]
    if not letters:
        raise ValueError("no letters given: answer with the choices' letters in order, e.g. "
                         + ",".join(quiz.choices))
    unknown = [letter for letter in letters if letter not in quiz.choices]
    if unknown:
        raise ValueError(f"not a choice: {', '.join(unknown)} (the choices are {', '.join(quiz.choices)})")
    repeated = sorted({letter for letter in letters if letters.count(letter) > 1})
    if repeated:
        raise ValueError(f"a line is printed once: {', '.join(repeated)} appears twice")
    return tuple(quiz.choices[letter] for letter in letters)


def list_quizzes(out: IO[str] = sys.stdout) -> int:
    """Print every quiz's name, one a line, in the book's order."""
    for quiz in QUIZZES:
        print(quiz.name, file=out)
    return 0


def _show(quiz: Quiz, out: IO[str]) -> None:
    print(f"== {quiz.name} ({quiz.chapter}): {quiz.title}", file=out)
    print(file=out)
    for number, line in enumerate(quiz.source().splitlines(), 1):
        print(f"{number:3}  {line}".rstrip(), file=out)
    print(file=out)
    print("Which of these lines does it print, and in which order?", file=out)
    for letter, line in quiz.choices.items():
        print(f"  {letter}) {line}", file=out)


def _columns(quiz: Quiz, outcomes: dict[str, Outcome], out: IO[str]) -> None:
    ran = [outcome for outcome in outcomes.values() if outcome.lines is not None]
    cells = {o.loop: [f"{quiz.letters([line])} {line}" for line in o.lines or ()] for o in ran}
    width = max([len(o.loop) for o in ran] + [len(c) for column in cells.values() for c in column]) + 3
    print("  " + "".join(f"{o.loop:<{width}}" for o in ran).rstrip(), file=out)
    for row in range(max(len(column) for column in cells.values())):
        print("  " + "".join(f"{(cells[o.loop][row] if row < len(cells[o.loop]) else ''):<{width}}"
                             for o in ran).rstrip(), file=out)


def side_by_side(outcomes: dict[str, Outcome], out: IO[str], width: int = 34) -> None:
    """Print the recorded runs' steps in columns, one per loop, ``width`` characters each."""
    traced = [outcome for outcome in outcomes.values() if outcome.steps]
    if not traced:
        return
    print("What each loop did (its trace: waits, [phases], callbacks, | printed lines):", file=out)
    print("  " + "".join(f"{o.loop:<{width}}" for o in traced).rstrip(), file=out)
    for row in range(max(len(o.steps or ()) for o in traced)):
        cells = [(o.steps or ())[row] if row < len(o.steps or ()) else "" for o in traced]
        print("  " + "".join(f"{_clip(cell, width - 2):<{width}}" for cell in cells).rstrip(), file=out)
    from tinyloop.trace.outside import CANNOT_RECORD
    for outcome in traced:
        if outcome.loop in CANNOT_RECORD:
            print(f"  ({outcome.loop} has no hooks and is seen from outside; its trace lacks "
                  f"{CANNOT_RECORD[outcome.loop]}.)", file=out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _report(quiz: Quiz, answer: tuple[str, ...] | None, outcomes: dict[str, Outcome],
            out: IO[str]) -> bool | None:
    """Print the grade and the loops' orders; return True/False for a given answer, None if skipped."""
    for outcome in outcomes.values():
        if outcome.lines is None:
            print(f"  {outcome.loop}: skipped: {outcome.problem}", file=out)
    reference = quiz.order
    right = None
    if answer is not None:
        right = answer == reference
        if right:
            print(f"Right: asyncio prints {quiz.letters(reference)}.", file=out)
        else:
            print(f"Not quite: you said {quiz.letters(answer)}, asyncio prints {quiz.letters(reference)}.",
                  file=out)
            for difference in quiz.differences:
                if answer == difference.order:
                    print(f"  (That is the order of {' and '.join(difference.loops)}: see below.)", file=out)
    for outcome in outcomes.values():
        if outcome.lines is not None and not quiz.agrees(outcome.loop, outcome.lines):
            print(f"  Unexpected: {outcome.loop} printed {quiz.letters(outcome.lines)}, where "
                  f"tinyloop/quiz/catalog.py expects {quiz.letters(quiz.expected(outcome.loop))}.", file=out)
    orders = {outcome.lines for outcome in outcomes.values() if outcome.lines is not None}
    if len(orders) > 1:
        print("The loops disagree:", file=out)
        _columns(quiz, outcomes, out)
        for difference in quiz.differences:
            if any(outcomes.get(loop) and outcomes[loop].lines == difference.order for loop in difference.loops):
                if difference.section:
                    print(f"{' and '.join(difference.loops)}: a known difference ({KNOWN_DIFFERENCES}, "
                          f"under \"{difference.section}\"):", file=out)
                    quote = f"\"{difference.quote}\""
                else:
                    print(f"{' and '.join(difference.loops)}: not ours, so not in {KNOWN_DIFFERENCES}:", file=out)
                    quote = difference.quote + "."
                print(textwrap.fill(quote, width=88, initial_indent="  ", subsequent_indent="  "), file=out)
    elif orders:
        names = ", ".join(outcome.loop for outcome in outcomes.values() if outcome.lines is not None)
        print(f"Every loop that ran ({names}) prints {quiz.letters(next(iter(orders)))}.", file=out)
    side_by_side(outcomes, out)
    print(textwrap.fill("Why: " + quiz.why, width=88), file=out)
    return right


def _ask(quiz: Quiz, given: str | None, stdin: IO[str], out: IO[str]) -> tuple[str, ...] | None:
    """The reader's answer as lines; None to skip.  Raises ValueError for a bad ``given``."""
    if given is not None:
        return parse_answer(quiz, given)
    example = ",".join(reversed(quiz.choices))
    while True:
        print(f"Your order (letters, e.g. {example}; leave out a line never printed; Enter skips): ",
              end="", file=out, flush=True)
        line = stdin.readline()
        if not line.strip():
            if not line:
                print(file=out)
            return None
        try:
            return parse_answer(quiz, line)
        except ValueError as error:
            print(f"  {error}", file=out)


def play(quiz: Quiz, given: str | None = None, *, loops: Sequence[str] = LOOPS,
         timeout: float = DEFAULT_TIMEOUT, stdin: IO[str] | None = None,
         out: IO[str] | None = None) -> bool | None:
    """Ask ``quiz``, run it on ``loops``, grade; True/False for an answer, None if skipped.

    Raises ValueError for a ``given`` answer that is not an order of the choices.
    """
    stdin = sys.stdin if stdin is None else stdin
    out = sys.stdout if out is None else out
    _show(quiz, out)
    answer = _ask(quiz, given, stdin, out)
    print(f"Running it on {', '.join(loops)}...", file=out, flush=True)
    outcomes = run_on_loops(quiz, loops, timeout)
    right = _report(quiz, answer, outcomes, out)
    print(file=out)
    return right


def main(name: str | None = None, *, list_only: bool = False, answer: str | None = None,
         loops: Sequence[str] = LOOPS, timeout: float = DEFAULT_TIMEOUT,
         stdin: IO[str] | None = None, out: IO[str] | None = None) -> int:
    """The ``quiz`` command (see the module docstring); returns the exit status."""
    out = sys.stdout if out is None else out
    if list_only:
        return list_quizzes(out)
    unknown = [loop for loop in loops if loop not in LOOPS]
    if unknown:
        print(f"tinyloop quiz: unknown loop {', '.join(unknown)}; the loops are {', '.join(LOOPS)}",
              file=sys.stderr)
        return 2
    if name is None:
        if answer is not None:
            print("tinyloop quiz: --answer needs a quiz NAME (see --list)", file=sys.stderr)
            return 2
        chosen = list(QUIZZES)
    else:
        try:
            chosen = [get(name)]
        except KeyError as error:
            print(f"tinyloop quiz: {error.args[0]}", file=sys.stderr)
            return 2
    results = []
    for quiz in chosen:
        try:
            results.append(play(quiz, answer, loops=loops, timeout=timeout, stdin=stdin, out=out))
        except ValueError as error:
            print(f"tinyloop quiz: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C at the prompt or while the loops run: stop, quietly
            print(file=out)
            return 130
    graded = [result for result in results if result is not None]
    if len(chosen) > 1:
        print(f"{sum(graded)} right of {len(graded)} answered ({len(chosen)} quizzes).", file=out)
    return 0 if all(graded) else 1
