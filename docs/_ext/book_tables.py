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
from sphinx.application import Sphinx

__all__ = ["STACK_FROM", "cell", "labelled_entry", "setup", "table"]

# Tables with this many columns or more stack their rows on a phone.
STACK_FROM = 4


class labelled_entry(nodes.entry):
    """A body cell that knows its column's name (``node["label"]``), written as ``data-label``."""


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
    stack = ["book-stack"] if width >= STACK_FROM else []
    node = nodes.table(classes=["book-table", *stack, *classes])
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
    labels = [item.astext() if isinstance(item, nodes.Node) else str(item) for item in header]
    for row in rows:
        body += _row(row, numeric_from, labels)
    return node


def _row(values: Sequence[object], numeric_from: int | None, labels: list[str] | None = None) -> nodes.row:
    row = nodes.row()
    for index, value in enumerate(values):
        entry = cell(value)
        if labels is not None:
            entry = labelled_entry("", *entry.children, label=labels[index])
        if numeric_from is not None and index >= numeric_from:
            entry["classes"].append("book-numeric")
        row += entry
    return row


def _visit_labelled_entry(self: object, node: labelled_entry) -> None:
    # docutils' own <td>, with the column's name added as data-label.
    self.visit_entry(node)  # type: ignore[attr-defined]
    label = self.attval(node["label"])  # type: ignore[attr-defined]
    body = self.body  # type: ignore[attr-defined]
    body[-1] = body[-1].replace("<td", f'<td data-label="{label}"', 1)


def _depart_labelled_entry(self: object, node: labelled_entry) -> None:
    self.depart_entry(node)  # type: ignore[attr-defined]


def setup(app: Sphinx) -> dict[str, object]:
    """Registers the labelled cell (HTML: data-label; other builders: a plain cell)."""
    app.add_node(labelled_entry, html=(_visit_labelled_entry, _depart_labelled_entry))
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
