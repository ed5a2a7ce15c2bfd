"""Measured numbers in the chapters' prose, read from the committed results when the book is built.

A sentence that quotes a measurement names where the number lives instead of typing it::

    {result}`pipeline.json:results/wrk-pipeline/asyncio-protocol/cpu_us_per_req`
    {result}`tornado.json:results/[handler=hello,tool=ab,loop=asyncio]/app_cpu_us_per_req|.0f`
    {result}`notfaster.json:layouts/load=any proxy=any app=any db=any/load_average/0`

The text before ``:`` is a file under ``benchmarks/results/``; the path after it walks the JSON one
``/``-separated step at a time: a key of an object, an index of a list, or ``[field=value,...]``,
the one element of a list whose fields have those values (``[key]``, without ``=``, is a key of an
object that has a ``/`` in it: ``counts/[ring/python]/keepalive``).  After ``|``, a format spec for Python's
``format()`` (``.1f``, ``,.0f``); without one, a number under 100 gets one decimal and a larger one
none, with thousands separated by commas.  A string (a date, a command) is rendered as it is.

A file's size, which prose likes to give, is counted the same way: ``{lines}`tinyloop/callbacks/loop.py```
renders the number of lines of that file of the checkout.

The same paths draw a chart of an experiment's rows (Part V's experiments, whose tables are their own
scripts' Markdown)::

    ```{results-chart} tornado.json
    :rows: results
    :where: handler=db,tool=wrk
    :name: {loop}
    :value: app_cpu_us_per_req
    :label: application CPU per request, µs
    ```

one bar per row at the median, whiskers from the row's ``spread`` (min to max of the repetitions),
drawn by the benchmark charts' own ``chart_svg`` (book_bench), and under it the line that says when,
by which command and at which load average the rows were measured.

Rules this module keeps:
  * One source: the number on the page is the number in the committed JSON, so prose, tables and
    charts cannot disagree, and a new reference run updates every sentence that quotes it.
  * A path that does not resolve (a file, a key, a selector matching no element or several) is an
    error at build time, never an empty span.
  * ``resolve`` and ``render`` are importable without Sphinx's application, so a test can read the
    same numbers the page shows (tests/test_book_numbers.py).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective, SphinxRole

__all__ = ["LinesRole", "RESULTS", "ResultRole", "ResultsChartDirective", "head_line", "load", "render", "resolve",
           "setup"]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
_SELECTOR = re.compile(r"^\[(.+)\]$")
_STEPS = re.compile(r"\[[^\]]*\]|[^/]+")


@lru_cache(maxsize=None)
def _read(path: Path, mtime: float) -> object:
    return json.loads(path.read_text(encoding="utf-8"))


def load(name: str) -> object:
    """The parsed JSON of ``benchmarks/results/NAME``; FileNotFoundError if it is not there."""
    path = RESULTS / name
    return _read(path, path.stat().st_mtime)


def steps(path: str) -> list[str]:
    """``"rows/[load=wrk,step=uv/no-batching]/cpu_us"`` -> its steps; a ``/`` inside ``[...]`` is
    part of a selector's value, not a separator."""
    return _STEPS.findall(path.strip())


def _step(value: object, step: str) -> object:
    selector = _SELECTOR.match(step)
    if selector and isinstance(value, dict) and "=" not in selector.group(1):
        return value[selector.group(1)]  # [ring/python]: a key with a / in it
    if selector:
        if not isinstance(value, list):
            raise KeyError(f"{step!r}: a selector needs a list, found {type(value).__name__}")
        wanted = dict(pair.split("=", 1) for pair in selector.group(1).split(","))
        found = [item for item in value if isinstance(item, dict)
                 and all(str(item.get(key)) == text for key, text in wanted.items())]
        if len(found) != 1:
            raise KeyError(f"{step!r} matches {len(found)} elements, not one")
        return found[0]
    if isinstance(value, list):
        return value[int(step)]
    if isinstance(value, dict):
        return value[step]
    raise KeyError(f"{step!r}: nothing below a {type(value).__name__}")


def resolve(reference: str) -> tuple[object, str | None]:
    """``"FILE:PATH|SPEC"`` -> ``(value, SPEC or None)``.

    Raises ValueError for a reference without ``:``, FileNotFoundError for a
    missing file, KeyError (or IndexError) for a path that does not resolve.
    """
    reference, _, spec = reference.strip().partition("|")
    name, colon, path = reference.partition(":")
    if not colon:
        raise ValueError(f"{reference!r}: write FILE:PATH (a file under benchmarks/results/)")
    value = load(name.strip())
    for step in steps(path):
        value = _step(value, step)
    return value, spec or None


def render(value: object, spec: str | None = None) -> str:
    """A value as the page shows it: numbers by ``spec`` or the default rule, the rest as text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if spec:
        return format(value, spec)
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


class ResultRole(SphinxRole):
    """``{result}`FILE:PATH|SPEC``: a number (or string) from a committed results file."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            value, spec = resolve(self.text)
            text = render(value, spec)
        except (ValueError, KeyError, IndexError, OSError, TypeError) as error:
            message = self.inliner.reporter.error(f"{{result}}`{self.text}`: {error}", line=self.lineno)
            return [], [message]
        self.env.note_dependency(str(RESULTS / self.text.partition(":")[0].strip()))
        return [nodes.inline(text, text, classes=["book-result"])], []


class LinesRole(SphinxRole):
    """``{lines}`PATH```: how many lines the checkout's file PATH (from the repository's root) has."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        path = ROOT / self.text.strip()
        try:
            count = len(path.read_text(encoding="utf-8").splitlines())
        except OSError as error:
            message = self.inliner.reporter.error(f"{{lines}}`{self.text}`: {error}", line=self.lineno)
            return [], [message]
        self.env.note_dependency(str(path))
        return [nodes.inline(str(count), str(count), classes=["book-result"])], []


def head_line(head: dict) -> str:
    """When, how and at which load a run was measured: its JSON head (``date``, ``command``,
    ``load_average`` as [start, end]) in one sentence."""
    parts = [f"Measured {head.get('date', 'at an unrecorded date')}"]
    load_average = head.get("load_average")
    if load_average:
        parts.append("load average " + " to ".join(f"{value:.1f}" for value in load_average))
    if head.get("command"):
        parts.append(f"by `{head['command']}`")
    return ", ".join(parts) + "."


class ResultsChartDirective(SphinxDirective):
    """``{results-chart} FILE``: the rows at ``:rows:`` (filtered by ``:where:``) as a bar chart."""

    required_arguments = 1
    option_spec = {"rows": directives.unchanged_required, "where": directives.unchanged,
                   "name": directives.unchanged_required, "value": directives.unchanged_required,
                   "label": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        from book_bench import chart_svg  # the benchmark charts' drawing, shared

        name = self.arguments[0]
        self.env.note_dependency(str(RESULTS / name))
        try:
            data = load(name)
            rows, head = data, data
            for step in steps(self.options["rows"]):
                rows = _step(rows, step)
                if isinstance(rows, dict) and "date" in rows:
                    head = rows  # a layout of its own (notfaster.json) carries its own head
            wanted = dict(pair.split("=", 1) for pair in self.options.get("where", "").split(",") if pair)
            chosen = [row for row in rows if all(str(row.get(key)) == text for key, text in wanted.items())]
            if not chosen:
                raise KeyError(f"no row of {self.options['rows']!r} has {wanted}")
            value = self.options["value"]
            bars = []
            for row in chosen:
                fields = {key: ",".join(map(str, item)) if isinstance(item, list) else item
                          for key, item in row.items()}
                low, high = (row.get("spread") or {}).get(value) or (None, None)
                median = row.get(value) if row.get("status", "ok") == "ok" else None
                bars.append((self.options["name"].format(**fields), median, low, high))
        except (KeyError, IndexError, ValueError, OSError) as error:
            raise self.error(f"{{results-chart}} {name}: {error}") from None
        svg = chart_svg(bars, self.options["label"], salt=f"{self.env.docname}:{self.lineno}")
        figure = nodes.figure(classes=["book-bench-chart"])
        figure += nodes.raw("", svg, format="html")
        caption = (f"{self.options['label']}: bars at the median, whiskers from the fastest to the "
                   f"slowest repetition (benchmarks/results/{name}).")
        figure += nodes.caption(caption, caption)
        line = head_line(head)
        legend = nodes.paragraph(classes=["book-bench-machine"])
        for index, piece in enumerate(line.split("`")):
            legend += nodes.literal(piece, piece) if index % 2 else nodes.Text(piece)
        figure += nodes.legend("", legend)
        return [figure]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_role("result", ResultRole())
    app.add_role("lines", LinesRole())
    app.add_directive("results-chart", ResultsChartDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
