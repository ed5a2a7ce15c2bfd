# docs/_ext/book_bench.py
#
# The benchmark directives.  The book's numbers have one source, the JSON
# that `bash scripts/benchmark.sh` writes (benchmarks/results/latest.json),
# and one reader, benchmarks/report.py; these directives only put what the
# reader returns on the page:
#
#   {bench-table}   :load: ab-close | ab-keepalive | wrk   (required)
#                   :servers: a comma list of server names (default: all)
#       a table from ``report.table(data, load, servers)``, captioned with
#       the machine the numbers were measured on.
#
#   {bench-plot}    :load: and :servers: as above; :alt: text
#       a PNG drawn by ``report.plot`` while the book builds.
#
# Rules:
#   * On a fresh clone there is no JSON yet.  That is not an error: each
#     directive renders a note telling the reader how to make one, and the
#     build passes.  Once the JSON exists, anything wrong with it (an unknown
#     load, a server not in the results, report.py failing) is a warning, so
#     an error under -W.
#   * A page that shows results depends on the JSON and on report.py, so a
#     new run rebuilds exactly those pages.

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path
from types import ModuleType

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from book_tables import table

__all__ = ["LOADS", "BenchPlotDirective", "BenchTableDirective", "setup"]

logger = logging.getLogger(__name__)

# The loads the harness runs, as named in the JSON.
LOADS = ("ab-close", "ab-keepalive", "wrk")

NO_RESULTS = ("No benchmark results yet: run ``bash scripts/benchmark.sh`` "
              "(it writes ``benchmarks/results/latest.json``), then build the book again.")


def _server_list(argument: str | None) -> list[str]:
    """``"epoll, poll"`` -> ``["epoll", "poll"]``; empty or absent -> ``[]`` (all)."""
    return [name.strip() for name in (argument or "").split(",") if name.strip()]


def _load_choice(argument: str | None) -> str:
    return directives.choice(argument, LOADS)


class _BenchDirective(SphinxDirective):
    has_content = False
    option_spec = {"load": _load_choice, "servers": _server_list}

    @property
    def results_path(self) -> Path:
        configured = self.config.book_bench_results
        if configured:
            return Path(configured)
        return Path(self.env.app.confdir).parent / "benchmarks" / "results" / "latest.json"

    def run(self) -> list[nodes.Node]:
        if "load" not in self.options:
            return self._warn(f":load: is required (one of {', '.join(LOADS)})")
        path = self.results_path
        # Depend on the file even while it is missing: its arrival rebuilds the page.
        self.env.note_dependency(str(path))
        if not path.exists():
            note = nodes.note()
            note += nodes.paragraph("", "", *self._inline(NO_RESULTS))
            return [note]
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            report = importlib.import_module("benchmarks.report")
        except Exception as error:
            return self._warn(f"cannot read {path}: {type(error).__name__}: {error}")
        if report.__file__:
            self.env.note_dependency(report.__file__)
        try:
            return self.render(report, data, self.options["load"], self.options.get("servers") or None)
        except Exception as error:
            return self._warn(f"benchmarks/report.py failed: {type(error).__name__}: {error}")

    def render(self, report: ModuleType, data: dict, load: str,
               servers: list[str] | None) -> list[nodes.Node]:
        raise NotImplementedError

    @staticmethod
    def _inline(text: str) -> list[nodes.Node]:
        # ``code`` spans to literals; the rest is text, whatever the page's parser.
        parts = text.split("``")
        out: list[nodes.Node] = []
        for index, part in enumerate(parts):
            out.append(nodes.literal(part, part) if index % 2 else nodes.Text(part))
        return out

    def _warn(self, message: str) -> list[nodes.Node]:
        logger.warning("{%s}: %s", self.name, message, location=self.get_location())
        return []


def machine_line(data: dict) -> str:
    """The caption line that says where and how the numbers were measured."""
    report = importlib.import_module("benchmarks.report")
    describe = getattr(report, "describe_machine", None)
    if describe is not None:
        return str(describe(data))
    machine = data.get("machine", {})
    if isinstance(machine, dict):
        return "; ".join(f"{key}: {value}" for key, value in machine.items())
    return str(machine)


class BenchTableDirective(_BenchDirective):
    """``{bench-table}``: one load's results as a table."""

    def render(self, report: ModuleType, data: dict, load: str,
               servers: list[str] | None) -> list[nodes.Node]:
        header, rows = report.table(data, load, servers)
        node = table(header, rows, classes=["book-bench"], numeric_from=1,
                     title=f"{load}: {machine_line(data)}")
        return [node]


class BenchPlotDirective(_BenchDirective):
    """``{bench-plot}``: one load's results drawn by ``report.plot`` at build time."""

    option_spec = {**_BenchDirective.option_spec, "alt": directives.unchanged}

    def render(self, report: ModuleType, data: dict, load: str,
               servers: list[str] | None) -> list[nodes.Node]:
        os.environ.setdefault("MPLBACKEND", "Agg")  # no display while building
        raw = json.dumps(data, sort_keys=True).encode() + repr((load, servers)).encode()
        digest = hashlib.sha256(raw).hexdigest()[:12]
        out_dir = Path(self.env.app.doctreedir) / "bench-plots"
        out_dir.mkdir(parents=True, exist_ok=True)
        png = out_dir / f"{load}-{digest}.png"
        if not png.exists():
            report.plot(data, load, png, servers=servers)
        # Image URIs are relative to the document; the builder copies the file.
        doc_dir = Path(self.env.doc2path(self.env.docname)).parent
        uri = os.path.relpath(png, doc_dir)
        alt = self.options.get("alt") or f"benchmark results, {load}"
        figure = nodes.figure(classes=["book-bench-plot"])
        figure += nodes.image(uri=uri, alt=alt)
        caption = f"{load}: {machine_line(data)}"
        figure += nodes.caption(caption, caption)
        return [figure]


def setup(app: Sphinx) -> dict[str, object]:
    # Where the results live; tests point it at a fixture.  Empty: the default.
    app.add_config_value("book_bench_results", "", "env", types=[str])
    app.add_directive("bench-table", BenchTableDirective)
    app.add_directive("bench-plot", BenchPlotDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
