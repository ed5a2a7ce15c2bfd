# docs/_ext/book_solutions.py
#
# Exercise solutions out of sight.  An exercise is a region of the reference
# source between two marker comments (tinyloop/exercises/markers.py), and
# the chapter that sets it also shows the code around it.  This extension
# makes ``literalinclude`` aware of the regions:
#
#   * the marker comments themselves never reach the page;
#   * in the default build, the lines of a region are cut out of the listing
#     and shown in its place collapsed, behind a "Reference solution"
#     dropdown (sphinx-design's, an HTML <details>: closed without any
#     JavaScript), so a student sees the answer only by a deliberate click;
#   * in a teacher's build, ``sphinx-build -t teacher`` (or the environment
#     switch TINYLOOP_BOOK_SOLUTIONS=omit), the region is left out of the
#     HTML entirely: one comment line says where it was and which command
#     writes the starter.  That is the copy a teacher publishes for a class.
#
# Rules this file keeps:
#   * Regions are found by the same regular expression as the checker's
#     (markers.MARKER), on the included text, so whatever the include options
#     (:pyobject:, :start-after:), a region shown is a region handled.
#   * Everything else ``literalinclude`` does is Sphinx's own: this is a
#     subclass that post-processes its result, not a reimplementation.

from __future__ import annotations

import os
import re

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude

from tinyloop.exercises.markers import MARKER

__all__ = ["ENV", "SolutionAwareLiteralInclude", "omit_solutions", "setup", "split_regions"]

# The environment switch, for a build command one cannot add -t to.
ENV = "TINYLOOP_BOOK_SOLUTIONS"
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


def omit_solutions(app: Sphinx) -> bool:
    """Whether this build leaves solutions out: ``-t teacher`` or TINYLOOP_BOOK_SOLUTIONS=omit."""
    return app.tags.has("teacher") or os.environ.get(ENV, "") == "omit"


class SolutionAwareLiteralInclude(LiteralInclude):
    """``literalinclude`` that hides exercise regions (see the module header)."""

    def run(self) -> list[nodes.Node]:
        result = super().run()
        for index, node in enumerate(result):
            blocks = [node] if isinstance(node, nodes.literal_block) else list(
                node.findall(nodes.literal_block))
            for block in blocks:
                if "# exercise " not in block.astext():
                    continue
                replacement = self._split(block)
                if block is node:
                    result[index:index + 1] = replacement
                else:
                    block.replace_self(replacement)
        return result

    def _split(self, block: nodes.literal_block) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        omit = omit_solutions(self.env.app)
        for name, indent, code in split_regions(block.astext()):
            if name is None:
                out.append(self._code(block, code))
            elif omit:
                note = (f"{indent}# exercise {name}: left out of this book; "
                        f"`python -m tinyloop start {name}` writes the starter\n")
                out.append(self._code(block, note))
            else:
                out.extend(self._dropdown(block, name, code))
        return out

    @staticmethod
    def _code(block: nodes.literal_block, code: str) -> nodes.literal_block:
        piece = nodes.literal_block(code, code)
        for key in ("language", "highlight_args", "source", "force", "linenos", "classes"):
            if key in block:
                piece[key] = block[key]
        piece.line = block.line
        return piece

    def _dropdown(self, block: nodes.literal_block, name: str, code: str) -> list[nodes.Node]:
        # sphinx-design's own directive builds the dropdown; only its body is ours.
        text = (f":::{{dropdown}} Reference solution: exercise {name} (try it first)\n"
                ":class-container: book-solution\n\n"
                "SOLUTION-PLACEHOLDER\n:::\n")
        made = self.parse_text_to_nodes(text)
        for para in made[0].findall(nodes.paragraph):
            if para.astext() == "SOLUTION-PLACEHOLDER":
                para.replace_self(self._code(block, code))
                break
        return made


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("sphinx_design")
    app.add_directive("literalinclude", SolutionAwareLiteralInclude, override=True)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
