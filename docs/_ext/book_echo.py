# docs/_ext/book_echo.py
#
# The Part III benchmark directives, each rendered from its JSON by its experiment's own ``table()``
# (book_bench's rules: without the JSON a note with the command, and the build passes; an unknown
# size or operation is a warning, so an error under -W):
#
#   {bench-echo}    :size: KiB (default every size measured)   benchmarks/echo.py's table (echo.json)
#   {bench-micro}   :op: (default every operation)            benchmarks/micro.py's table (micro.json)

from __future__ import annotations

from types import ModuleType

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx

from book_bench import ResultsDirective, bullets, command_line, machine_note
from book_tables import table

__all__ = ["BenchEchoDirective", "BenchMicroDirective", "setup"]


class BenchEchoDirective(ResultsDirective):
    """``{bench-echo}``: the echo benchmark's table for one message size, or for each."""

    option_spec = {"size": directives.positive_int}
    script, results, config_value, what = "benchmarks.echo", "echo.json", "book_echo_results", "echo"
    command = "python -m benchmarks.echo --reference"

    def render(self, script: ModuleType, data: dict) -> list[nodes.Node]:
        sizes = data["settings"]["sizes"]
        if "size" in self.options:
            wanted = self.options["size"] * 1024
            if wanted not in sizes:
                raise KeyError(f":size: {self.options['size']} KiB is not in this run "
                               f"(it measured {', '.join(str(s // 1024) for s in sizes)} KiB)")
            sizes = [wanted]
        out: list[nodes.Node] = []
        for size in sizes:
            header, rows = script.table(data, size)
            title = (f"TCP echo, {script._size_label(size)} messages, "
                     f"{data['settings']['connections']} connections")
            out.append(table(header, rows, title=title, classes=["book-bench"], numeric_from=1))
        notes = script.notes(data) + [script.NOTES[key] for key in ("ratio", "cpu", "noisy")]
        return [*out, command_line("Load generator: ", data["client"]), bullets(notes),
                machine_note(data)]


class BenchMicroDirective(BenchEchoDirective):
    """``{bench-micro}``: the loop micro-benchmarks' table for one operation, or for each."""

    option_spec = {"op": directives.unchanged}
    script, results, config_value, what = "benchmarks.micro", "micro.json", "book_micro_results", "micro-benchmark"
    command = "python -m benchmarks.micro --reference"

    def render(self, script: ModuleType, data: dict) -> list[nodes.Node]:
        ops = data["operations"]
        if "op" in self.options:
            ops = [op for op in ops if op["name"] == self.options["op"]]
            if not ops:
                raise KeyError(f":op: {self.options['op']!r}; this run has "
                               f"{', '.join(op['name'] for op in data['operations'])}")
        out: list[nodes.Node] = []
        for op in ops:
            header, rows = script.table(data, op["name"])
            out.append(table(header, rows, title=f"{op['name']}: {op['what']}",
                             classes=["book-bench"], numeric_from=1))
        return [*out, command_line("Command: ", data["command"]), machine_note(data, script.describe_machine)]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("book_echo_results", "", "env", types=[str])
    app.add_config_value("book_micro_results", "", "env", types=[str])
    app.add_directive("bench-echo", BenchEchoDirective)
    app.add_directive("bench-micro", BenchMicroDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
