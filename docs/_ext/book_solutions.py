# docs/_ext/book_solutions.py
#
# Two editions of the book from one source.  An exercise is a region of the
# reference source between two marker comments (tinyloop/exercises/markers.py),
# and those regions are the chapters' central listings.  This extension makes
# ``literalinclude`` aware of them:
#
#   * the marker comments themselves never reach the page;
#   * the reader's edition (the default build) shows every listing whole: a
#     region stays in its listing, its lines highlighted, and a callout
#     before the listing names the exercise, the one command that starts it
#     (``python -m tinyloop start NAME``) and asks the reader to try it
#     before reading on;
#   * the class edition (``sphinx-build -t class``; ``-t teacher``, its old
#     name, and the environment switch TINYLOOP_BOOK_SOLUTIONS=omit are
#     accepted too) leaves each region out of the HTML entirely: one comment
#     line says where it was and which command writes the starter.  That is
#     the copy a teacher publishes for a class.
#
# Rules this file keeps:
#   * Regions are found by the same regular expression as the checker's
#     (markers.MARKER), on the included text, so whatever the include options
#     (:pyobject:, :start-after:), a region shown is a region handled.
#   * Everything else ``literalinclude`` does is Sphinx's own: this is a
#     subclass that post-processes its result, not a reimplementation.  One
#     default differs: ``:dedent:`` is on (a method listed by :pyobject:
#     starts at the margin, not four spaces in).
#   * The edition is the config value ``book_edition``, set from the tags and
#     the environment when the configuration is read, and it rebuilds the
#     environment when it changes.  Sphinx re-reads no unchanged source on a
#     tag change alone (it only rewrites the pages from the cached doctrees),
#     so without this a class build into a folder that held a reader's build
#     kept every solution and said "0 changed".
#
# Discussion: why highlight the region instead of boxing it apart?  A region
# is a whole block inside a function (the body of run_once's loop, the
# transport's write): split out, the code around it reads as two fragments.
# Kept in place, the listing is the function as it runs, and the highlight
# shows which lines the exercise asks for.

from __future__ import annotations

import os
import re

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.directives.code import LiteralInclude

from tinyloop.exercises.markers import MARKER

__all__ = ["EDITIONS", "ENV", "SolutionAwareLiteralInclude", "edition", "omit_solutions",
           "setup", "split_regions"]

# The environment switch, for a build command one cannot add -t to.
ENV = "TINYLOOP_BOOK_SOLUTIONS"
# The editions, and the tags that ask for the class edition ("teacher" is its old name).
EDITIONS = ("reader", "class")
CLASS_TAGS = ("class", "teacher")
_MARKER_LINE = re.compile(rf"^(?P<indent>[ \t]*){MARKER.pattern}[ \t]*$")


def split_regions(text: str) -> list[tuple[str | None, str, str]]:
    """``text`` (a listing) as pieces ``(exercise or None, indent, lines)`` in order.

    A piece with an exercise name holds the lines between that exercise's
    markers (markers excluded); a piece with None holds code outside any
    region.  Markers of a region cut by the listing's edges are simply dropped.
    """
    pieces: list[tuple[str | None, str, str]] = []
    current: list[str] = []
    name: str | None = None
    indent = ""
    for line in text.splitlines(keepends=True):
        match = _MARKER_LINE.match(line.rstrip("\n"))
        if match is None:
            current.append(line)
            continue
        marker_name, kind = match.group(2), match.group(3)  # group 1 is the indent
        if kind == "begin" and name is None:
            pieces.append((None, "", "".join(current)))
            current, name, indent = [], marker_name, match.group("indent")
        elif kind == "end" and name == marker_name:
            pieces.append((name, indent, "".join(current)))
            current, name = [], None
        # any other marker line (an end whose begin is outside the listing) is dropped
    pieces.append((name, indent, "".join(current)))
    return [p for p in pieces if p[2].strip()]


def edition(app: Sphinx) -> str:
    """The edition this build makes: ``"class"`` or ``"reader"`` (see the module header)."""
    return str(app.config.book_edition)


def omit_solutions(app: Sphinx) -> bool:
    """Whether this build leaves solutions out: the class edition."""
    return edition(app) == "class"


def _choose_edition(app: Sphinx, config: Config) -> None:
    """config-inited: the edition from ``-t class``/``-t teacher``, TINYLOOP_BOOK_SOLUTIONS or ``-D``."""
    wanted = os.environ.get(ENV, "")
    if any(app.tags.has(tag) for tag in CLASS_TAGS) or wanted == "omit":
        config.book_edition = "class"
    if config.book_edition not in EDITIONS:
        raise ConfigError(f"book_edition must be one of {', '.join(EDITIONS)}, "
                          f"not {config.book_edition!r}")
    # The tag is set either way, so a chapter may say `{only} class` too.
    app.tags.add(config.book_edition)


class SolutionAwareLiteralInclude(LiteralInclude):
    """``literalinclude`` that knows exercise regions (see the module header)."""

    def run(self) -> list[nodes.Node]:
        # A method or a region listed alone reads from the left margin: the
        # common indentation is removed unless the chapter says otherwise.
        self.options.setdefault("dedent", None)
        result = super().run()
        out: list[nodes.Node] = []
        for node in result:
            blocks = [node] if isinstance(node, nodes.literal_block) else list(
                node.findall(nodes.literal_block))
            for block in blocks:
                if "# exercise " not in block.astext():
                    continue
                callouts, code = self._edition(block)
                out.extend(callouts)  # before the listing (and its caption)
                if block is node:
                    node = code
                else:
                    block.replace_self(code)
            out.append(node)
        return out

    def _edition(self, block: nodes.literal_block) -> tuple[list[nodes.Node], nodes.literal_block]:
        """The callouts to put before the listing, and the listing in this edition."""
        pieces = split_regions(block.astext())
        names = list(dict.fromkeys(name for name, _, _ in pieces if name is not None))
        if omit_solutions(self.env.app):
            lines = []
            for name, indent, code in pieces:
                lines.append(code if name is None else
                             f"{indent}# exercise {name}: left out of this book; "
                             f"`python -m tinyloop start {name}` writes the starter\n")
            return [], self._code(block, "".join(lines), [])
        # The reader's edition: the listing whole, its regions highlighted,
        # a callout before it.
        text, highlighted, line = "", [], 1
        for name, _, code in pieces:
            count = code.count("\n") + (0 if code.endswith("\n") else 1)
            if name is not None:
                highlighted.extend(range(line, line + count))
            text += code if code.endswith("\n") else code + "\n"
            line += count
        return [self._callout(name) for name in names], self._code(block, text, highlighted)

    @staticmethod
    def _code(block: nodes.literal_block, code: str, highlighted: list[int]) -> nodes.literal_block:
        piece = nodes.literal_block(code, code)
        for key in ("language", "highlight_args", "source", "force", "linenos", "classes"):
            if key in block:
                piece[key] = block[key]
        args = dict(piece.get("highlight_args", {}))
        args.pop("hl_lines", None)  # the listing's own :emphasize-lines: counted the markers
        if highlighted:
            args["hl_lines"] = highlighted
        piece["highlight_args"] = args
        if block.get("ids"):
            piece["ids"] = block["ids"]
        piece.line = block.line
        return piece

    @staticmethod
    def _callout(name: str) -> nodes.Element:
        box = nodes.admonition(classes=["book-try-first"])
        box += nodes.title("", f"Exercise {name}")
        command = f"python -m tinyloop start {name}"
        box += nodes.paragraph(
            "", "", nodes.Text("The highlighted lines below are the solution of exercise "),
            nodes.literal(name, name), nodes.Text(". Try it before you read on: "),
            nodes.literal(command, command),
            nodes.Text(" writes the file with those lines cut out, and "),
            nodes.literal(f"python -m tinyloop check {name}", f"python -m tinyloop check {name}"),
            nodes.Text(" grades it."))
        return box


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("sphinx_design")
    # rebuild="env": a build of the other edition re-reads every source.
    app.add_config_value("book_edition", "reader", "env", types=[str])
    app.connect("config-inited", _choose_edition)
    app.add_directive("literalinclude", SolutionAwareLiteralInclude, override=True)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
