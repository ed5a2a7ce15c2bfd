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
#     before the first listing of a page that holds it says, in the
#     exercise's own title, what the lines do, and how to write them first
#     (``python -m tinyloop start NAME``), linking to the exercise; a later
#     listing of the same region on that page only highlights it;
#   * the class edition (``sphinx-build -t class``, or the environment switch
#     TINYLOOP_BOOK_SOLUTIONS=omit) leaves each region out of the HTML
#     entirely: one comment line says where it was and which command writes
#     the starter.  Any other listing that quotes a line of a solution (the
#     teachers' page shows the checker's mutants, which are solution lines
#     changed) has that line replaced by a note.  That is the copy a teacher
#     publishes for a class.
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

import functools
import os
import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.directives.code import LiteralInclude

from tinyloop.exercises.markers import MARKER

__all__ = ["EDITIONS", "ENV", "SolutionAwareLiteralInclude", "edition", "omit_solutions", "quoted",
           "setup", "solution_lines", "split_regions"]

# The environment switch, for a build command one cannot add -t to.
ENV = "TINYLOOP_BOOK_SOLUTIONS"
# The editions; the tag `-t class` asks for the class edition.
EDITIONS = ("reader", "class")
# The reference sources the exercises are cut from.
_SOURCES = Path(__file__).resolve().parents[2] / "tinyloop"
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
    """config-inited: the edition from ``-t class``, TINYLOOP_BOOK_SOLUTIONS or ``-D``."""
    wanted = os.environ.get(ENV, "")
    if app.tags.has("class") or wanted == "omit":
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
                if "# exercise " in block.astext():
                    callouts, code = self._edition(block)
                elif omit_solutions(self.env.app):
                    callouts, code = [], self._redacted(block)
                else:
                    continue
                out.extend(callouts)  # before the listing (and its caption)
                if code is block:
                    continue
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
        shown = self.env.temp_data.setdefault("book_callouts", set())  # this page's, reset per page
        callouts = [self._callout(name) for name in names if name not in shown]
        shown.update(names)
        return callouts, self._code(block, text, highlighted)

    def _redacted(self, block: nodes.literal_block) -> nodes.literal_block:
        """Class edition: ``block`` with each line that quotes a solution line replaced by a note."""
        text = block.astext()
        kept = "\n".join(redact(line) for line in text.split("\n"))
        return block if kept == text else self._code(block, kept, [])

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

    def _callout(self, name: str) -> nodes.Element:
        """The callout: the exercise's own title, the command that starts it, a link to its box."""
        from tinyloop.exercises import catalog
        exercise = catalog.get(name)
        box = nodes.admonition(classes=["book-try-first"], ids=[f"try-{name}"])
        title = f"Try it first: {exercise.title}"
        box += nodes.title(title, title)
        start = f"python -m tinyloop start {name}"
        target = self.env.app.builder.get_relative_uri(self.env.docname, exercise.chapter)
        box += nodes.paragraph(
            "", "", nodes.Text("The highlighted lines below are exercise "),
            nodes.reference("", "", nodes.literal(name, name), refuri=f"{target}#exercise-{name}"),
            nodes.Text(": "), nodes.literal(start, start),
            nodes.Text(" writes this file without them, for you to fill in."))
        return box


@functools.lru_cache(maxsize=1)
def solution_lines() -> tuple[tuple[str, str], ...]:
    """``(exercise, line)`` for every line of every exercise region that gives the answer away.

    A line counts when its text (whitespace removed, as each ``line`` here
    is) appears in no tinyloop source outside the exercise regions nor in
    the exercise's instructions (the question may name a call the answer
    makes), is not a comment, and is long enough (8 characters) not to occur
    in prose by chance: ``return``, ``else:`` or a line written elsewhere
    too give nothing away.
    """
    from tinyloop.exercises import catalog, markers
    outside: set[str] = set()
    inside: list[tuple[str, str]] = []
    for path in sorted(_SOURCES.glob("**/*")):
        if path.suffix not in (".py", ".pyx", ".pxd"):
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        regions = markers.find_regions(text, str(path)) if "# exercise " in text else []
        cut = {i for region in regions for i in range(region.begin, region.end - 1)}
        names = {i: region.name for region in regions for i in range(region.begin, region.end - 1)}
        for index, line in enumerate(lines):
            squeezed = "".join(line.split())
            if index in cut:
                inside.append((names[index], squeezed))
            else:
                outside.add(squeezed)
    asked = {exercise.name: "".join(exercise.instructions.split()) for exercise in catalog.exercises()}
    return tuple(dict.fromkeys((name, line) for name, line in inside
                               if name in asked and len(line) >= 8 and not line.startswith("#")
                               and line not in outside and line not in asked[name]))


def quoted(text: str) -> list[tuple[str, str]]:
    """The ``(exercise, line)`` of :func:`solution_lines` that ``text`` quotes.

    Compared without whitespace, and only where the line starts a token
    (``if conn.wants_read:`` is not quoted by ``elif conn.wants_read:``).
    """
    squeezed = "".join(text.split())
    return [(name, line) for name, line in solution_lines()
            if line in squeezed and re.search(r"(?<![\w.])" + re.escape(line), squeezed)]


def redact(line: str) -> str:
    """``line`` (one line, without its newline) cut where it first quotes a solution line, with a
    note in place of the rest; ``line`` itself when it quotes none."""
    found = quoted(line)
    if not found:
        return line
    name, wanted = found[0]
    where = [index for index, char in enumerate(line) if not char.isspace()]  # squeezed -> line
    start = re.search(r"(?<![\w.])" + re.escape(wanted), "".join(line.split())).start()
    return f"{line[:where[start]]}[a line of exercise {name}'s solution: left out of this book]"


def _redact_docstring(app: Sphinx, what: str, name: str, obj: object, options: object,
                      lines: list[str]) -> None:
    """autodoc-process-docstring, class edition: a docstring line quoting a solution becomes a note."""
    if not omit_solutions(app):
        return
    lines[:] = [redact(line) for line in lines]


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("sphinx_design")
    # rebuild="env": a build of the other edition re-reads every source.
    app.add_config_value("book_edition", "reader", "env", types=[str])
    app.connect("config-inited", _choose_edition)
    app.add_directive("literalinclude", SolutionAwareLiteralInclude, override=True)
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("autodoc-process-docstring", _redact_docstring)  # the API pages quote no solution either
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
