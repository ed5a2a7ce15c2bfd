"""The book's figures drawn from traces, and its "predict the order" quizzes.

  {trace-figure} NAME        (the directive's body is the caption)
      The trace of figure NAME (trace_figures.py beside this file: FIGURES),
      cut to the window its caption is about, drawn by
      tinyloop.trace.timeline.render into the page (HTML and SVG that fit
      the column at any width), with the caption, the trace as text where
      the figure asks for it (left-aligned, monospace: its indentation is
      the nesting), the command that makes the trace, and where it came
      from.  A ``build`` figure is traced while the book
      builds, on the virtual clock, so it is the same on every build; a
      ``reference`` figure is drawn from its committed file under
      benchmarks/results/traces/ (``... --reference`` records it again).

  {quiz} NAME
      A quiz of tinyloop/quiz/: its question, its program (a
      literalinclude of the file), the lines to order, and behind a
      dropdown the answer on each loop, the known difference where the
      loops disagree, the reason, and the run's trace on tinyloop.aio
      (virtual clock: the same on every build) as text and as a timeline.

Rules:
  * Offline and deterministic: nothing here touches the network, and a
    build figure depends only on the code it traces.
  * A reference figure whose file is missing is a note with the command
    that records it (as book_bench does for missing results), not an
    error; an unknown figure or quiz name is an error (a warning under -W).
  * Drawing is tinyloop.trace.timeline's; this file only chooses what to
    draw and puts it on the page.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

import trace_figures  # beside this file (docs/conf.py puts docs/_ext on sys.path)

ROOT = Path(__file__).resolve().parent.parent.parent

__all__ = ["QuizDirective", "TraceFigureDirective", "setup"]


# A figure's caption and legend read left-aligned (the theme centres figures); the trace as
# text keeps its indentation, scrolling sideways rather than wrapping.
_FIGURE_STYLE = ("<style>figure.book-trace-figure, figure.book-trace-figure figcaption, "
                 "figure.book-trace-figure .caption, figure.book-trace-figure .legend "
                 "{ text-align: left; } pre.book-trace-steps { text-align: left; white-space: pre; "
                 "overflow-x: auto; font-family: var(--font-stack--monospace, monospace); font-size: 0.8em; "
                 "line-height: 1.4; padding: 0.5em; background: var(--color-code-background, #f8f8f8); }</style>")


def _svg_block(trace: dict[str, Any]) -> nodes.raw:
    from tinyloop.trace import timeline
    return nodes.raw("", f'<div class="book-trace">{_FIGURE_STYLE}{timeline.render(trace)}</div>', format="html")


def _text_block(text: str) -> nodes.raw:
    """The trace as text, in a left-aligned monospace block."""
    import html
    return nodes.raw("", f'<pre class="book-trace-steps">{html.escape(text)}</pre>', format="html")


def _source_line(label: str, code: str, tail: str = "") -> nodes.paragraph:
    line = nodes.paragraph(classes=["book-trace-command"])
    line += nodes.Text(label)
    line += nodes.literal(code, code)
    if tail:
        line += nodes.Text(tail)
    return line


class TraceFigureDirective(SphinxDirective):
    """``{trace-figure} NAME``: a figure of trace_figures.py, drawn from its trace."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        try:
            figure = trace_figures.get(self.arguments[0])
        except KeyError as error:
            raise self.error(error.args[0]) from None
        # The figure changes when the code it traces does: Sphinx rebuilds the page.
        self.env.note_dependency(trace_figures.__file__)
        if figure.source == "reference":
            self.env.note_dependency(str(figure.reference_file))
        trace = trace_figures.trace_of(figure)
        if trace is None:
            note = nodes.note()
            note += nodes.paragraph(text=f"This figure is drawn from a recorded trace, "
                                         f"{figure.reference_file.relative_to(ROOT)}, which is not here yet.")
            note += _source_line("Record it with ", figure.command, ".")
            return [note]
        full = trace
        trace = figure.drawn(trace)
        node = nodes.figure(classes=["book-trace-figure"], ids=[f"trace-{figure.name}"])
        node += _svg_block(trace)
        caption_text = " ".join(self.content) if self.content else figure.summary
        caption = nodes.caption(caption_text, "")
        caption += self.parse_inline(caption_text, lineno=self.lineno)[0]
        node += caption
        legend = nodes.legend()
        if figure.facts is not None:   # numbers read off the trace drawn above, never typed
            legend += nodes.paragraph(text="From this trace: " + figure.facts(trace))
        if figure.text:   # the same trace as text: what a printed page cannot hover over
            from tinyloop.quiz import steps
            cut = figure.crop(full) if figure.crop else (None, None)
            text = "\n".join(steps.steps(trace_figures.window(full, *cut)))
            legend += _text_block(text)
        if figure.source == "build":
            legend += _source_line(
                f"Traced while the book builds, on the virtual clock ({trace_figures.TICK * 1e6:g} µs per "
                "clock reading: widths show what ran, not how long): ", figure.command, ".")
        else:
            other = trace.get("otherData", {})
            recorded = f"{other.get('recorded_events', '?')} events" + (
                f", the oldest {other['dropped_events']} dropped by the ring buffer"
                if other.get("dropped_events") else "")
            legend += _source_line(
                f"Recorded in real time on the reference machine ({recorded}), committed as "
                f"{figure.reference_file.relative_to(ROOT)}; re-recorded by ", figure.command, ".")
            if other.get("recorder_cost"):   # what recording cost the loop, measured with the run
                from tinyloop.trace import timeline
                legend += nodes.paragraph(text=timeline.cost_sentence(trace))
        node += legend
        return [node]


def quiz_trace(name: str) -> dict[str, Any]:
    """The trace of quiz ``name``'s program on tinyloop.aio, on the virtual clock.

    Run in this process (the virtual clock makes it quick, and the same on
    every build); what the program prints is kept out of the build's log.
    """
    import contextlib
    import io
    from tinyloop.quiz import catalog, runner
    quiz = catalog.get(name)
    with tempfile.TemporaryDirectory(prefix="book-quiz-") as scratch:
        path = Path(scratch) / "trace.json"
        with contextlib.redirect_stdout(io.StringIO()):
            runner.run("aio", str(quiz.path), str(path), virtual_clock=True)
        return json.loads(path.read_text())


class QuizDirective(SphinxDirective):
    """``{quiz} NAME``: a quiz, with its answer, reason and trace behind a dropdown."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        from tinyloop.quiz import catalog, steps
        try:
            quiz = catalog.get(self.arguments[0])
        except KeyError as error:
            raise self.error(error.args[0]) from None
        self.env.note_dependency(str(quiz.path))
        self.env.note_dependency(str(ROOT / "tinyloop" / "quiz" / "catalog.py"))
        doc_dir = Path(self.env.doc2path(self.env.docname)).parent
        relative = Path(os.path.relpath(quiz.path, doc_dir)).as_posix()
        choices = "\n".join(f"- **{letter}**) `{line}`" for letter, line in quiz.choices.items())
        per_loop = []
        for loop in catalog.LOOPS:
            per_loop.append(f"- {loop}: **{quiz.letters(quiz.expected(loop))}**")
        differences = "\n".join(
            f"\n{' and '.join(d.loops)} {'differ' if len(d.loops) > 1 else 'differs'}: "
            + (f"a known difference (`{catalog.KNOWN_DIFFERENCES}`, under \"{d.section}\"): \"{d.quote}\"\n"
               if d.section else f"{d.quote}.\n")
            for d in quiz.differences)
        trace = quiz_trace(quiz.name)
        text = "\n".join(steps.steps(trace))
        # Drawn up to the last printed line (and a little after): the rest is the sleep that ends main.
        printed = [event["ts"] for event in trace["traceEvents"] if event.get("name", "").startswith("print: ")]
        svg = _svg_block(trace_figures.window(trace, end=max(printed, default=0) + 30))
        lines = [
            f"**{quiz.title}** (`python -m tinyloop quiz {quiz.name}`)",
            "",
            f"```{{literalinclude}} {relative}",
            ":language: python",
            ":lines: 2-",
            "```",
            "",
            "Which of these lines does it print, and in which order?",
            "",
            choices,
            "",
            ":::{dropdown} Answer",
            "",
            f"asyncio prints **{quiz.letters(quiz.order)}**: "
            + ", then ".join(f"`{line}`" for line in quiz.order) + ".",
            "",
            *per_loop,
            differences,
            quiz.why,
            "",
            "Its run on tinyloop.aio, traced on the virtual clock (each wait, each callback, and "
            "`|` where a line was printed):",
            "",
            "```text",
            text,
            "```",
            "",
            "@@SVG@@",
            "",
            *self._loops_side_by_side(quiz),
            ":::",
        ]
        container = nodes.container(classes=["book-quiz"], ids=[f"quiz-{quiz.name}"])
        parsed = self.parse_text_to_nodes("\n".join(lines))
        container.extend(parsed)
        for paragraph in list(container.findall(nodes.paragraph)):
            if paragraph.astext() == "@@SVG@@":
                paragraph.replace_self(svg)
        return [container]


    def _loops_side_by_side(self, quiz: Any) -> list[str]:
        """For a quiz where the loops disagree: every loop's run, traced, as text in columns."""
        if not quiz.differences:
            return []
        text, skipped, unexpected = _recorded_runs()[quiz.name]
        for loop, lines in unexpected:
            # The book's answer would be wrong: a loop's order changed, or the catalog is out of date.
            self.reporter.warning(f"quiz {quiz.name}: {loop} printed {quiz.letters(lines)}, the catalog "
                                  f"(tinyloop/quiz/catalog.py) says {quiz.letters(quiz.expected(loop))}",
                                  line=self.lineno)
        lines = ["The loops disagree. Each loop's run, recorded when this book was built "
                 f"(`python -m tinyloop quiz {quiz.name}` shows the same):", "", "```text",
                 text, "```", ""]
        if skipped:
            lines += [f"Not run here: {'; '.join(skipped)}.", ""]
        return lines


@functools.lru_cache(maxsize=1)
def _recorded_runs() -> dict[str, tuple[str, list[str], list[tuple[str, tuple[str, ...]]]]]:
    """Every quiz where the loops disagree, run and traced on each loop (a subprocess per loop, all at once).

    Quiz name -> (the steps side by side as text, the loops that could not
    run with why, the loops that printed another order than the catalog's).
    """
    import io
    from concurrent.futures import ThreadPoolExecutor
    from tinyloop.quiz import catalog, cli
    differing = [quiz for quiz in catalog.QUIZZES if quiz.differences]
    with ThreadPoolExecutor(max_workers=len(catalog.LOOPS)) as pool:   # one interpreter per loop
        by_loop = dict(zip(catalog.LOOPS, pool.map(lambda loop: cli.run_batch(differing, loop), catalog.LOOPS)))
    runs = {quiz.name: {loop: by_loop[loop][quiz.name] for loop in catalog.LOOPS} for quiz in differing}
    out: dict[str, tuple[str, list[str], list[tuple[str, tuple[str, ...]]]]] = {}
    for quiz in differing:
        outcomes = runs[quiz.name]
        text = io.StringIO()
        cli.side_by_side(outcomes, text, width=30)
        out[quiz.name] = (text.getvalue().rstrip(),
                          [f"{o.loop} ({_without_paths(o)})" for o in outcomes.values() if o.lines is None],
                          [(o.loop, o.lines) for o in outcomes.values()
                           if o.lines is not None and not quiz.agrees(o.loop, o.lines)])
    return out


def _without_paths(outcome: Any) -> str:
    """Why a loop did not run, without the building machine's paths (a reader's page shows it)."""
    if outcome.unavailable:
        return "not installed where this book was built"
    return re.sub(r"(?:/[^/\s'\"()]+)+/([^/\s'\"()]+)", r"\1", outcome.problem)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("trace-figure", TraceFigureDirective)
    app.add_directive("quiz", QuizDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

