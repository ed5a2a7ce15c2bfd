# docs/_ext/book_tables.py
#
# One helper shared by the book's directives: turn a header and rows of
# cells into a docutils table node.  A cell is plain text, except that text
# between backquotes (`like this`) is set as inline code, so a command or
# a stage name reads as something to type; a cell may also be a docutils
# node already built (a link, say).

from __future__ import annotations

from collections.abc import Sequence

from docutils import nodes

__all__ = ["cell", "table"]


def cell(text: object) -> nodes.entry:
    """One table cell holding ``text``: a node as it is, else ``str(text)``
    (backquoted spans become code, ``None`` an empty cell)."""
    para = nodes.paragraph()
    if isinstance(text, nodes.Node):
        para += text
        return nodes.entry("", para)
    value = "" if text is None else str(text)
    # `code` spans alternate with plain text: odd pieces of the split are code.
    for index, piece in enumerate(value.split("`") if value.count("`") % 2 == 0 else [value]):
        if index % 2:
            para += nodes.literal(piece, piece)
        elif piece:
            para += nodes.Text(piece)
    return nodes.entry("", para)


def table(header: Sequence[object], rows: Sequence[Sequence[object]], *,
          title: str | None = None, classes: Sequence[str] = (),
          numeric_from: int | None = None) -> nodes.table:
    """A ``nodes.table`` with one header row and ``rows``.

    ``numeric_from``: the columns from this index on hold numbers and are
    right-aligned (the ``book-numeric`` class on their cells).  Raises
    ``ValueError`` if a row's length differs from the header's.
    """
    width = len(header)
    for row in rows:
        if len(row) != width:
            raise ValueError(f"row {list(row)!r} has {len(row)} cells, the header {width}")
    node = nodes.table(classes=["book-table", *classes])
    if title:
        node += nodes.title(title, title)
    group = nodes.tgroup(cols=width)
    node += group
    for _ in range(width):
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    head += _row(header, numeric_from)
    body = nodes.tbody()
    group += body
    for row in rows:
        body += _row(row, numeric_from)
    return node


def _row(values: Sequence[object], numeric_from: int | None) -> nodes.row:
    row = nodes.row()
    for index, value in enumerate(values):
        entry = cell(value)
        if numeric_from is not None and index >= numeric_from:
            entry["classes"].append("book-numeric")
        row += entry
    return row
