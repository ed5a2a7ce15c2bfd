# docs/conf.py
#
# Sphinx configuration for the tinyloop book.  The chapters (MyST Markdown)
# live in chapters/, this directory holds only configuration and the book's
# extensions; the build runs from the repository root:
#
#     sphinx-build -W --keep-going -n -c docs -b html chapters docs/_build/html
#
# Rules this configuration keeps:
#   * Warnings are errors (-W), and nitpicky mode (-n) makes every unresolved
#     cross-reference a warning, so a listing whose function was renamed, an
#     exercise that vanished or a broken link stops the build.
#   * No network and no theme beyond what Sphinx ships (alabaster), so the
#     book builds offline on a fresh clone.
#   * Numbers and figures come from benchmarks/results/latest.json through the
#     directives in docs/_ext; nothing measured is typed into a chapter.

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# The repository root first, so autodoc and the extensions import this
# checkout's tinyloop and benchmarks rather than an installed copy.
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]

project = "tinyloop"
author = "the tinyloop authors"
copyright = "the tinyloop authors"
release = version = "0.1"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "book_autodoc",
    "book_api",
    "book_toc",
    "book_catalog",
    "book_bench",
]

root_doc = "index"
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "**/.*"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = "tinyloop: an event loop, from select() up"
html_theme_options = {
    "description": "An event loop in pure Python, read beside its code.",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "230px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_show_sourcelink = False

# Python listings and signatures are highlighted as Python 3.
highlight_language = "python3"
pygments_style = "sphinx"

# autodoc: members in source order, as the files are meant to be read.
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# Nitpicky mode resolves every type in a signature.  Without intersphinx
# (which needs the network) the standard library's types have no target;
# those are ignored by name, and tinyloop's own must resolve.
nitpick_ignore_regex = [
    ("py:class", r"(bytes|bytearray|str|int|float|bool|object|dict|list|tuple|set|type|None)"),
    ("py:class", r"(collections\.abc|typing|types|socket|select|selectors|os|dataclasses)\..*"),
    ("py:class", r"(Callable|Iterable|Iterator|Mapping|Sequence|Any|ModuleType|Exception)"),
    ("py:exc", r"(KeyError|ValueError|OSError|BlockingIOError|ConnectionError|KeyboardInterrupt|"
               r"NotImplementedError|ImportError|RuntimeError|TimeoutError|StopIteration)"),
]
