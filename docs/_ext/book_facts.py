# docs/_ext/book_facts.py
#
# Facts the chapters state about the machine that builds the book, measured
# when it is built instead of typed into the prose:
#
#   {book-fact}`python`         the running CPython's version (3.11.7)
#   {book-fact}`loop-methods`   how many public methods asyncio.AbstractEventLoop
#                               defines on that Python (tests/test_docs.py checks
#                               the number on every CPython 3.11+ it finds)
#   {book-fact}`libuv`          libuv's uv_version_string(), from the library
#                               tinyloop.uv links against (ctypes; "not found"
#                               where libuv is not installed)
#   {book-fact}`libuv-order`    which order of an iteration's phases that libuv
#                               runs: libuv 1.44's and older, or 1.45's and newer
#
# Rules this file keeps:
#   * A fact is measured in the process that builds the book, so it describes
#     the reader's own machine when the reader builds it (python -m tinyloop book).
#   * An unknown fact name is an error: a typo never renders as nothing.

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import platform

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxRole

__all__ = ["FACTS", "abstract_loop_methods", "libuv_version", "setup"]


def abstract_loop_methods() -> list[str]:
    """The public methods ``asyncio.AbstractEventLoop`` defines on this Python, by name."""
    return sorted(name for name, value in vars(asyncio.AbstractEventLoop).items()
                  if callable(value) and not name.startswith("_"))


def libuv_version() -> str | None:
    """libuv's ``uv_version_string()`` ("1.44.2"), or None where libuv cannot be loaded."""
    for name in ("libuv.so.1", ctypes.util.find_library("uv")):
        if not name:
            continue
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        library.uv_version_string.restype = ctypes.c_char_p
        return library.uv_version_string().decode()
    return None


def _phase_order() -> str:
    version = libuv_version()
    if version is None:
        return "no libuv installed"
    major, minor = (int(part) for part in version.split(".")[:2])
    if (major, minor) >= (1, 45):
        return f"libuv {version}, which runs the order of 1.45 and newer (timers after poll, check and close)"
    return f"libuv {version}, which runs the order of 1.44 and older (the numbered list above)"


FACTS = {
    "python": platform.python_version,
    "loop-methods": lambda: str(len(abstract_loop_methods())),
    "libuv": lambda: libuv_version() or "not found",
    "libuv-order": _phase_order,
}


class FactRole(SphinxRole):
    """``{book-fact}`NAME``: the fact, measured now, as plain text."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        fact = FACTS.get(self.text.strip())
        if fact is None:
            message = self.inliner.reporter.error(
                f"unknown book-fact {self.text!r}; known: {', '.join(FACTS)}", line=self.lineno)
            return [], [message]
        text = fact()
        return [nodes.inline(text, text, classes=["book-fact"])], []


def setup(app: Sphinx) -> dict[str, object]:
    app.add_role("book-fact", FactRole())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
