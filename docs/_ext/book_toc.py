# docs/_ext/book_toc.py
#
# The ``book-toctree`` directive: a toctree that lists the whole planned book
# in reading order and shows the chapters that exist.
#
#     ```{book-toctree}
#     :maxdepth: 2
#     intro
#     baselines
#     callbacks
#     ```
#
# A plain toctree warns about an entry whose file does not exist yet, and the
# build treats warnings as errors; a glob cannot fix the order.  This one
# drops missing entries silently, so a chapter appears in its place the day
# its file is committed.  A misspelt entry is still caught: the real file it
# meant would then be in no toctree, which Sphinx reports.

from __future__ import annotations

from docutils.nodes import Node
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.directives.other import TocTree

__all__ = ["BookTocTree", "setup"]


class BookTocTree(TocTree):
    """A ``toctree`` whose entries that name no existing document are left out."""

    def run(self) -> list[Node]:
        kept = [line for line in self.content if self._exists(line.strip())]
        self.content = StringList(kept, source=self.content.source(0) if self.content else None)
        # Read this document again on every build: the set of chapters may have changed.
        self.env.note_reread()
        return super().run()

    def _exists(self, entry: str) -> bool:
        if not entry:
            return False
        name = entry.rsplit("<", 1)[-1].rstrip(">").strip()
        return name in self.env.found_docs


def setup(app: Sphinx) -> dict[str, object]:
    app.add_directive("book-toctree", BookTocTree)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
