# docs/_ext/book_bench.py
#
# The benchmark directives.  The book's numbers have one source, the committed JSON under
# benchmarks/results/, and one reader per experiment (benchmarks/report.py for the main run, each
# experiment's own ``table``); these directives only put what the reader returns on the page:
#
#   {bench-table}   :load: (required) :servers: (comma list; default all) :notes: (report.FOOTNOTES keys)
#   {bench-plot}    :load: (default every load) :servers: :alt:   a PNG drawn by report.plot
#   {bench-chart}   :load: (required) :servers: :figure: cpu|rps  an inline SVG: bars at the median,
#                   whiskers min to max
#   {bench-journey} :load: (default wrk)   each stage in reading order, what it adds, CPU µs/request
#   {bench-fairness}                       benchmarks/fairness.py's table (fairness.json)
#   {bench-idle}    :figure: cpu|rps|p99|waits|fds   benchmarks/idle.py's table (idle.json)
#
# Without the JSON (a fresh clone) a directive renders a note saying how to make it, and the build
# passes; with it, anything wrong (an unknown load or server, another schema) is a warning, so an
# error under -W; a known server a partial run left out is a row saying "not run".  A page depends
# on its JSON and its reader.  Config values (book_bench_results, book_fairness_results,
# book_idle_results) point at another JSON: the tests' fixtures.

from __future__ import annotations

import hashlib
import html
import importlib
import json
import os
import re
from pathlib import Path
from collections.abc import Callable
from types import ModuleType

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from book_tables import table

__all__ = ["BenchChartDirective", "BenchJourneyDirective", "BenchFairnessDirective", "BenchIdleDirective",
           "BenchPlotDirective", "BenchTableDirective", "ResultsDirective", "bullets", "command_line",
           "known_servers", "load_names", "machine_note", "setup", "split_servers"]

logger = logging.getLogger(__name__)

NO_RESULTS = ("No benchmark results yet: the book shows the reference run committed as "
              "``benchmarks/results/latest.json``, which a maintainer writes with "
              "``bash scripts/benchmark.sh --reference``. Your own run (``bash scripts/benchmark.sh``) "
              "writes ``benchmarks/results/local/latest.json``; build the book with "
              "``-D book_bench_results=benchmarks/results/local/latest.json`` to see it here.")


def load_names() -> list[str]:
    """The loads the harness runs, from benchmarks/loads.py (its one list of them)."""
    return [load.name for load in importlib.import_module("benchmarks.loads").LOADS]


def known_servers() -> set[str]:
    """Every server the harness knows: the stages and the peers."""
    stages = importlib.import_module("tinyloop.stages").STAGES
    peers = importlib.import_module("benchmarks.servers").PEERS
    return {stage.name for stage in stages} | {peer.name for peer in peers}


def split_servers(data: dict, load: str, servers: list[str]) -> tuple[list[str], list[str]]:
    """``(in_run, not_run)``: the names the run has for ``load``, and known ones it lacks.

    A run made with ``--stages``/``--peers`` measures only some servers; a
    chapter's table then says "not run" in their rows rather than failing.
    Raises ``KeyError`` for a name the harness does not know at all (a typo).
    """
    results = data.get("results", {}).get(load, {})
    listed = {entry["name"] for entry in data.get("servers", [])}
    unknown = [name for name in servers if name not in known_servers() and name not in listed]
    if unknown:
        raise KeyError(f"unknown server {', '.join(map(repr, unknown))}: neither a stage "
                       "(tinyloop/stages.py) nor a peer (benchmarks/servers.py)")
    skipped = {entry["name"] for entry in data.get("servers", []) if entry.get("skipped")}
    in_run = [name for name in servers if name in results or name in skipped]
    return in_run, [name for name in servers if name not in in_run]


def _name_list(argument: str | None) -> list[str]:
    """``"epoll, poll"`` -> ``["epoll", "poll"]``; empty or absent -> ``[]`` (all)."""
    return [name.strip() for name in (argument or "").split(",") if name.strip()]


def _code_spans(text: str) -> list[nodes.Node]:
    """Text with ``double-backquoted`` spans as literals, whatever the page's parser."""
    return [nodes.literal(part, part) if index % 2 else nodes.Text(part)
            for index, part in enumerate(text.split("``")) if part]


class ResultsDirective(SphinxDirective):
    """A directive rendered from an experiment's JSON: a subclass names its reader (``script``), the
    JSON under benchmarks/results/, the config value pointing elsewhere, the command that writes it
    and a word for the note; ``render(script, data)`` builds the nodes."""

    has_content = False
    script = results = config_value = command = what = ""

    def missing(self) -> str:
        return f"No {self.what} results yet: run ``{self.command}``, then build the book again."

    def read(self, script: ModuleType, path: Path) -> dict:
        return json.loads(path.read_text(encoding="utf-8"))

    def run(self) -> list[nodes.Node]:
        configured = getattr(self.config, self.config_value)
        path = Path(configured) if configured else (
            Path(self.env.app.confdir).parent / "benchmarks" / "results" / self.results)
        self.env.note_dependency(str(path))  # even while missing: its arrival rebuilds the page
        if not path.exists():
            note = nodes.note()
            note += nodes.paragraph("", "", *_code_spans(self.missing()))
            return [note]
        try:
            script = importlib.import_module(self.script)
            self.env.note_dependency(script.__file__)
            return self.render(script, self.read(script, path))
        except Exception as error:
            return self._warn(f"{path}: {type(error).__name__}: {error}")

    def render(self, script: ModuleType, data: dict) -> list[nodes.Node]:
        raise NotImplementedError

    def _warn(self, message: str) -> list[nodes.Node]:
        logger.warning("{%s}: %s", self.name, message, location=self.get_location())
        return []


class _BenchDirective(ResultsDirective):
    """The main run's directives: benchmarks/report.py reads latest.json; ``show`` builds the nodes."""

    option_spec = {"load": directives.unchanged_required, "servers": _name_list}
    script, results, config_value = "benchmarks.report", "latest.json", "book_bench_results"
    load_required = True

    def missing(self) -> str:
        return NO_RESULTS

    def run(self) -> list[nodes.Node]:
        load = self.options.get("load")
        known = load_names()
        if load is None and self.load_required:
            return self._warn(f":load: is required (one of {', '.join(known)})")
        if load is not None and load not in known:
            return self._warn(f"unknown load {load!r}; benchmarks/loads.py has {', '.join(known)}")
        return super().run()

    def read(self, report: ModuleType, path: Path) -> dict:
        data = report.load(path)
        root = Path(self.env.app.confdir).parent
        try:
            shown = str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            shown = str(path)
        # Said under every table and plot: which results the book shows.
        data["_book_source"] = ("the committed reference run, " + shown
                                if not self.config.book_bench_results else shown)
        return data

    def render(self, report: ModuleType, data: dict) -> list[nodes.Node]:
        return self.show(report, data, self.options.get("load"), self.options.get("servers") or None)

    def show(self, report: ModuleType, data: dict, load: str | None,
             servers: list[str] | None) -> list[nodes.Node]:
        raise NotImplementedError


def machine_note(data: dict, describe: Callable[[dict], str] | None = None) -> nodes.paragraph:
    """The line under a table or plot: where the results were measured (``describe(data)``, default
    the harness's render.describe_machine), and which results file the book shows."""
    describe = describe or importlib.import_module("benchmarks.harness.render").describe_machine
    line = nodes.paragraph(classes=["book-bench-machine"])
    line += nodes.emphasis("Measured on: ", "Measured on: ")
    line += nodes.Text(describe(data))
    source = data.get("_book_source")
    if source:
        line += nodes.Text(" (")
        line += nodes.literal(source, source)
        line += nodes.Text(")")
    return line


def command_line(label: str, command: str) -> nodes.paragraph:
    """``label`` then ``command`` as code: the line under a table that says what made it."""
    line = nodes.paragraph(classes=["book-bench-command"])
    line += nodes.Text(label)
    line += nodes.literal(command, command)
    return line


def bullets(notes: list[str]) -> nodes.bullet_list:
    """The notes under a table, one item each."""
    items = nodes.bullet_list(classes=["book-bench-notes"])
    for note in notes:
        items += nodes.list_item("", nodes.paragraph(note, note))
    return items


class BenchTableDirective(_BenchDirective):
    """``{bench-table}``: one load's results as a table."""

    option_spec = {**_BenchDirective.option_spec, "notes": _name_list}

    def show(self, report: ModuleType, data: dict, load: str | None,
             servers: list[str] | None) -> list[nodes.Node]:
        assert load is not None
        in_run, not_run = split_servers(data, load, servers) if servers else (None, [])
        header, rows = report.table(data, load, in_run, ratios=data.get("baseline") is not None)
        notes = report.footnotes(data, load, in_run) if in_run != [] else []
        if not_run:
            rows += [[name, "not run", *["—"] * (len(header) - 2)] for name in not_run]
            rows.sort(key=lambda row: servers.index(row[0]))
            notes.append(f"not run: {', '.join(not_run)} (this run measured other servers)")
        entry = next(e for e in data["loads"] if e["name"] == load)
        wanted = list(self.options.get("notes", []))
        if "spread" not in wanted and any(row[header.index("min–max")].endswith("noisy") for row in rows):
            wanted.append("spread")  # a noisy row is flagged, so say what that means
        for key in wanted:
            if key not in report.FOOTNOTES:
                return self._warn(f"unknown note {key!r}; report.FOOTNOTES has {', '.join(report.FOOTNOTES)}")
            notes.append(report.FOOTNOTES[key])
        return [table(header, rows, title=f"{load}: {entry['title']}", classes=["book-bench"], numeric_from=1),
                command_line("Command: ", entry["command"]), *([bullets(notes)] if notes else []),
                machine_note(data)]


class BenchPlotDirective(_BenchDirective):
    """``{bench-plot}``: results drawn by ``report.plot`` while the book builds."""

    option_spec = {**_BenchDirective.option_spec, "alt": directives.unchanged}
    load_required = False

    def show(self, report: ModuleType, data: dict, load: str | None,
             servers: list[str] | None) -> list[nodes.Node]:
        if servers is not None and load is not None:
            servers, not_run = split_servers(data, load, servers)
            if not servers:
                note = nodes.note()
                note += nodes.paragraph(text=f"This run measured none of: {', '.join(not_run)}.")
                return [note]
        # The file's name is a digest of what it shows and of the code that
        # draws it: a new run, other options or a changed report.py draw a
        # new file, and an unchanged one is not drawn again.
        key = json.dumps([data, load, servers], sort_keys=True).encode() + Path(report.__file__).read_bytes()
        digest = hashlib.sha256(key).hexdigest()[:16]
        png = Path(self.env.app.doctreedir) / "bench-plots" / f"{load or 'all'}-{digest}.png"
        if not png.exists():
            report.plot(data, load, png, servers=servers)
        # Image URIs are relative to the document; the HTML builder copies the file.
        doc_dir = Path(self.env.doc2path(self.env.docname)).parent
        uri = os.path.relpath(png, doc_dir)
        alt = self.options.get("alt") or f"benchmark results: {load or 'every load'}"
        figure = nodes.figure(classes=["book-bench-plot"])
        figure += nodes.image(uri=uri, alt=alt)
        caption = f"{load or 'Every load'}: requests per second and server CPU time per request."
        figure += nodes.caption(caption, caption)
        figure += nodes.legend("", machine_note(data))
        return [figure]


# The stages of the journey, one per step of the book, in reading order
# (variants of a step, epoll-et and the streams servers, stay in their
# chapters' charts).
JOURNEY = ("blocking", "threaded", "select", "poll", "epoll", "callbacks", "generators", "yieldfrom",
           "coroutines", "aio", "uv")
CHART_FIGURES = {"cpu": ("cpu_us_per_req", "server CPU time per request, µs"),
                 "rps": ("rps", "requests per second")}


def chart_svg(rows: list[tuple[str, float | None, float | None, float | None]], label: str,
              salt: str, missing: dict[str, str] | None = None, marks: dict[str, str] | None = None) -> str:
    """An inline SVG bar chart: ``rows`` are ``(name, median, min, max)``, top to bottom.

    A row without a median is drawn as its name and why it has none
    (``missing[name]``, as its table says it: "timeout", "not run"; default
    "no figure"); ``marks[name]`` is appended to a row's value (the table's
    ``*`` of a partial row).  Whiskers (min to max) are drawn where both ends
    are known, each line carrying an id that starts ``book-whisker``.  The
    ``<svg>`` carries the row names in order as ``data-rows`` (a JSON list),
    so the browser test can hold a chart against its table.  The figure is
    5 in wide with 12 pt text (values 11 pt), so on a 390 px phone, scaled to
    the column, its labels stay about 11 px high.
    """
    import io

    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt, "font.size": 12,
                                "axes.spines.top": False, "axes.spines.right": False}):
        figure, axes = pyplot.subplots(figsize=(5.0, 0.9 + 0.34 * len(rows)))
        positions = list(range(len(rows)))[::-1]
        medians = [row[1] or 0.0 for row in rows]
        bars = axes.barh(positions, medians, color="#4c72b0", height=0.6)
        for bar, row in zip(bars, rows):
            if row[1] is None:
                bar.set_visible(False)
        top = max([row[3] or row[1] or 0.0 for row in rows] + [1.0])
        for index, (position, (name, median, low, high)) in enumerate(zip(positions, rows)):
            if median is None:
                axes.text(0, position, f"  {(missing or {}).get(name, 'no figure')}", va="center",
                          fontsize=11, color="#555")
                continue
            if low is not None and high is not None:
                line, = axes.plot([low, high], [position, position], color="#222", linewidth=1.4)
                line.set_gid(f"book-whisker-{index}")
                for end in (low, high):
                    cap, = axes.plot([end, end], [position - 0.18, position + 0.18], color="#222",
                                     linewidth=1.4)
                    cap.set_gid(f"book-whisker-cap-{index}")
            value = f"{median:,.1f}" if median < 100 else f"{median:,.0f}"
            axes.text((high if high is not None else median) + top * 0.02, position,
                      value + (marks or {}).get(name, ""), va="center", fontsize=11)
        axes.set_yticks(positions, [row[0] for row in rows])
        axes.set_xlim(0, top * 1.22)
        axes.set_xlabel(label)
        axes.tick_params(axis="y", length=0)
        figure.tight_layout()
        out = io.StringIO()
        figure.savefig(out, format="svg")
        pyplot.close(figure)
    svg = out.getvalue()
    svg = svg[svg.index("<svg"):]
    # Scale to the column: drop the fixed size, keep the viewBox.
    head, rest = svg.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    names = html.escape(json.dumps([row[0] for row in rows]), quote=True)
    return (head + f' class="book-chart-svg" role="img" data-rows="{names}" '
            'preserveAspectRatio="xMinYMin meet">' + rest)


def _figure_rows(data: dict, load: str, servers: list[str], figure: str
                 ) -> list[tuple[str, float | None, float | None, float | None]]:
    """``(name, median, min, max)`` of ``figure`` per server, as its table shows them: a partial row
    (some repetitions failed) keeps the median of the others; a failed one has None."""
    key = CHART_FIGURES[figure][0]
    rows = []
    for name in servers:
        summary = data.get("results", {}).get(load, {}).get(name) or {}
        median = summary.get(key) if summary.get("status") in ("ok", "partial") else None
        low, high = (summary.get("spread") or {}).get(key) or (None, None)
        rows.append((name, median, low if median is not None else None, high if median is not None else None))
    return rows


def _chart_node(svg: str, caption: str, report: ModuleType, data: dict) -> nodes.figure:
    figure = nodes.figure(classes=["book-bench-chart"])
    figure += nodes.raw("", svg, format="html")
    figure += nodes.caption(caption, caption)
    figure += nodes.legend("", machine_note(data))
    return figure


class BenchChartDirective(_BenchDirective):
    """``{bench-chart}``: one load's rows as bars at the median with min–max whiskers."""

    option_spec = {**_BenchDirective.option_spec, "figure": directives.unchanged}

    def show(self, report: ModuleType, data: dict, load: str | None,
             servers: list[str] | None) -> list[nodes.Node]:
        assert load is not None
        figure = self.options.get("figure") or "cpu"
        if figure not in CHART_FIGURES:
            return self._warn(f":figure: {figure!r}; choose from {', '.join(CHART_FIGURES)}")
        # The rows of the table beside it ({bench-table} with the same :servers:), in its order:
        # a server that failed or was not run is a row saying so, as in the table.
        not_run = split_servers(data, load, servers)[1] if servers else []
        servers = servers or report.server_names(data, load)
        rows = _figure_rows(data, load, servers, figure)
        results = data.get("results", {}).get(load, {})
        missing = {name: "not run" if name in not_run else (results.get(name) or {}).get("status", "skipped")
                   for name, median, _, _ in rows if median is None}
        marks = {name: "*" for name, median, _, _ in rows
                 if median is not None and results[name].get("status") == "partial"}
        salt = hashlib.sha256(json.dumps([load, servers, figure, rows]).encode()).hexdigest()[:12]
        runs = data.get("settings", {}).get("repeat")
        partial = "; *: some runs failed, the bar is the median of the others (the table's notes say why)"
        caption = (f"{load}: {CHART_FIGURES[figure][1]}. Bars at the median"
                   f"{f' of {runs} runs' if runs else ''}; whiskers from the fastest to the slowest run"
                   f"{partial if marks else ''}.")
        svg = chart_svg(rows, CHART_FIGURES[figure][1], salt, missing, marks)
        svg = svg.replace("<svg ", f'<svg data-load="{html.escape(load, quote=True)}" ', 1)  # its table's load
        return [_chart_node(svg, caption, report, data)]


class BenchJourneyDirective(_BenchDirective):
    """``{bench-journey}``: every stage in reading order, what it adds, its CPU per request."""

    load_required = False

    def show(self, report: ModuleType, data: dict, load: str | None,
             servers: list[str] | None) -> list[nodes.Node]:
        load = load or "wrk"
        stages = {stage.name: stage for stage in importlib.import_module("tinyloop.stages").STAGES}
        names = [name for name in JOURNEY if name in stages]
        rows = _figure_rows(data, load, names, "cpu")
        # Three narrow columns, so the table fits a phone; the spread is the chart's.
        header = ["stage", "what it adds", "CPU µs/req"]
        body = []
        for name, median, low, high in rows:
            summary = re.split(r"[:;]", stages[name].summary, maxsplit=1)[0]
            if median is None:
                figure = (data.get("results", {}).get(load, {}).get(name) or {}).get("status", "not run")
            else:
                figure = f"{median:.1f}"
            body.append([name, summary, figure])
        entry = next(e for e in data["loads"] if e["name"] == load)
        salt = hashlib.sha256(json.dumps(["journey", load, rows]).encode()).hexdigest()[:12]
        caption = (f"The journey, under {load} ({entry['title']}): server CPU time per request, "
                   "median and min–max of the runs, one bar per stage in reading order.")
        missing = {name: body[index][2] for index, (name, median, _, _) in enumerate(rows) if median is None}
        return [table(header, body, title=f"The stages, in reading order ({load})",
                      classes=["book-bench", "book-journey"], numeric_from=2),
                _chart_node(chart_svg(rows, CHART_FIGURES["cpu"][1], salt, missing), caption, report, data)]


class BenchFairnessDirective(ResultsDirective):
    """``{bench-fairness}``: the fairness benchmark's table, from its JSON."""

    script, results, config_value, what = ("benchmarks.fairness", "fairness.json",
                                           "book_fairness_results", "fairness")
    command = "python -m benchmarks.fairness --reference"

    def render(self, script: ModuleType, data: dict) -> list[nodes.Node]:
        header, rows = script.table(data)
        return [table(header, rows, classes=["book-bench"], numeric_from=2),
                machine_note(data)]


class BenchIdleDirective(ResultsDirective):
    """``{bench-idle}``: the idle-connections benchmark's table for one figure, from its JSON."""

    option_spec = {"figure": directives.unchanged}
    script, results, config_value, what = "benchmarks.idle", "idle.json", "book_idle_results", "idle-connection"
    command = "python -m benchmarks.idle --reference"

    def render(self, script: ModuleType, data: dict) -> list[nodes.Node]:
        figure = self.options.get("figure") or "cpu"
        if figure not in script.FIGURES:
            raise KeyError(f":figure: {figure!r}; choose from {', '.join(script.FIGURES)}")
        header, rows = script.table(data, figure)
        out: list[nodes.Node] = [table(header, rows, title=script.FIGURES[figure][1],
                                       classes=["book-bench"], numeric_from=1)]
        out.append(command_line("Command: ", data["load_command"]))
        if figure in script.NOTES:
            out.append(nodes.paragraph(text=script.NOTES[figure], classes=["book-bench-notes"]))
        out.append(machine_note(data))
        return out


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("book_tables")  # its tables' labelled cells (the phone layout)
    app.add_config_value("book_bench_results", "", "env", types=[str])
    app.add_config_value("book_fairness_results", "", "env", types=[str])
    app.add_config_value("book_idle_results", "", "env", types=[str])
    app.add_directive("bench-fairness", BenchFairnessDirective)
    app.add_directive("bench-idle", BenchIdleDirective)
    app.add_directive("bench-table", BenchTableDirective)
    app.add_directive("bench-plot", BenchPlotDirective)
    app.add_directive("bench-chart", BenchChartDirective)
    app.add_directive("bench-journey", BenchJourneyDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
