# docs/_ext/book_api.py
#
# The API reference documents every public module of a package, found by
# listing the package, so a module that lands in git appears in the
# reference with no edit to the book.  In chapters/api.md,
#
#     ```{api-package} tinyloop.raw
#     ```
#
# becomes, before the page is parsed, one section per module:
#
#     ### tinyloop.raw.connection
#     ```{automodule} tinyloop.raw.connection
#     ```
#
# Sections cannot come out of a directive, which is why this is done on the
# page's source (the ``source-read`` event) rather than as a directive.
# Modules whose name starts with an underscore, ``__main__`` and the
# per-chapter exercise catalogs (data, not API) are left out.

from __future__ import annotations

import importlib
import pkgutil
import re

from sphinx.application import Sphinx

__all__ = ["expand", "public_modules", "setup"]

_FENCE = re.compile(r"^```\{api-package\}[ \t]+(?P<package>[\w.]+)[ \t]*\n```[ \t]*$", re.MULTILINE)


def public_modules(package: str) -> list[str]:
    """The importable public modules of ``package``, in name order (not imported)."""
    module = importlib.import_module(package)
    names = []
    for info in pkgutil.iter_modules(module.__path__):
        if info.name.startswith("_") or info.name.startswith("catalog_") or info.ispkg:
            continue
        names.append(f"{package}.{info.name}")
    return sorted(names)


def expand(text: str, heading: str = "###") -> str:
    """``text`` with every ``{api-package}`` fence replaced by its modules' sections."""
    def sections(match: re.Match[str]) -> str:
        return "\n".join(f"{heading} {name}\n\n```{{automodule}} {name}\n```\n"
                         for name in public_modules(match.group("package")))
    return _FENCE.sub(sections, text)


def _on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    if "{api-package}" in source[0]:
        source[0] = expand(source[0])
        # Read the page again on every build: modules may have been added.
        app.env.note_reread()


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("source-read", _on_source_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
