# docs/conf.py
#
# Sphinx configuration for the tinyloop book.  The chapters (MyST Markdown)
# live in chapters/, this directory holds only configuration and the book's
# extensions.  `python -m tinyloop book` builds it (tinyloop/book.py): Sphinx
# with -W -n, reading a copy of chapters/ kept under the output folder
# (book.stage), so the API pages autosummary generates are written there and
# the checkout stays as it is.
#
# Rules this configuration keeps:
#   * Warnings are errors (-W), and nitpicky mode (-n) makes every unresolved
#     cross-reference a warning, so a listing whose function was renamed, an
#     exercise that vanished or a broken link stops the build.
#   * No network: the theme (furo) and the extensions (sphinx-design,
#     sphinx-copybutton, autosummary) are installed packages that ship their
#     assets, so the book builds offline on a fresh clone.
#   * Our own extensions (docs/_ext) only for what is ours alone: the
#     benchmark tables and plots from the results JSON, the stage table, the
#     exercise catalogue, and hiding exercise solutions (book_solutions).
#   * Numbers and figures come from benchmarks/results/latest.json through the
#     directives in docs/_ext; nothing measured is typed into a chapter.
#   * Two editions from one source (book_solutions): the reader's (default)
#     shows every listing whole, with a callout before each exercise region;
#     the class edition (`-t class`, or TINYLOOP_BOOK_SOLUTIONS=omit)
#     leaves the regions out.  Switching
#     edition in one output folder re-reads every source (no leak).

from __future__ import annotations

import platform
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
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",  # before book_autodoc, so the stdlib's names link first
    "sphinx.ext.extlinks",
    "sphinx_copybutton",
    "sphinx_design",
    "book_autodoc",
    "book_solutions",
    "book_catalog",
    "book_bench",
    "book_echo",
    "book_facts",  # {book-fact}: numbers measured when the book is built (the Python, libuv)
    "book_numbers",  # {result} and {results-chart}: measured numbers read from benchmarks/results/
    "book_trace",   # {trace-figure} and {quiz}: figures drawn from traces, the "predict the order" quizzes
    "book_map",  # {loop-map}: which class supplies each step of an iteration, from the classes' MRO
    "sphinx.ext.graphviz",  # static diagrams that are not traces; `dot` is installed by scripts/setup.sh
]
graphviz_output_format = "svg"

root_doc = "index"
# .rst for the API pages autosummary writes (into api/, ignored by git).
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "**/.*"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The API reference: one page per module, found by listing the package
# (chapters/api.md), so a new module needs no edit to the book.
autosummary_generate = True
autosummary_ignore_module_all = True  # list every submodule, whatever a package's __all__ says
templates_path = [str(DOCS / "_templates")]  # absolute: autosummary reads it from the source dir

html_theme = "furo"
html_title = "tinyloop: an event loop, from select() up"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_favicon = "_static/favicon.svg"
html_show_sourcelink = False
html_theme_options = {"navigation_with_keys": True}

# The copy button leaves out prompts and the output of shell sessions.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

# Python listings and signatures are highlighted as Python 3.
highlight_language = "python3"

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
    ("py:mod", r"(selectors|select|socket|asyncio|heapq|time|os|threading|tokenize|ast)"),
    ("py:func", r"(time|os|socket|select|asyncio|heapq)\..*"),
    ("py:class", r"(pathlib|concurrent\.futures|asyncio|_asyncio|contextvars|ssl)\..*"),
    # Private modules are not in the reference; two names the reference
    # documents only where they are defined, not where a docstring uses them.
    ("py:mod", r"tinyloop\._.*"),
    ("py:meth", r"YieldFromScheduler\.run"),
    ("py:func", r"shutdown_default_executor"),
    ("py:exc", r"(KeyError|ValueError|OSError|BlockingIOError|ConnectionError|KeyboardInterrupt|"
               r"NotImplementedError|ImportError|RuntimeError|TimeoutError|StopIteration)"),
]

# Sources, linked.  The standard library by intersphinx from an inventory
# shipped in the repository, so the build stays offline: docs/_inventories/
# python-3.11.inv is the objects.inv of Debian's python3.11-doc package
# (`apt-get download python3.11-doc`, then `dpkg-deb -x` and copy
# usr/share/doc/python3.11/html/objects.inv); the links go to docs.python.org.
intersphinx_mapping = {
    "python": ("https://docs.python.org/3.11/", str(DOCS / "_inventories" / "python-3.11.inv")),
}
intersphinx_timeout = 1
# {cpython}`Lib/asyncio/events.py` links CPython's file at the tag of the
# Python that builds the book (the one the chapters' listings run on);
# {libuv}`design.html` a page of libuv's documentation; {manpage}`epoll(7)`
# the Linux man page; {rfc} and {pep} are Sphinx's own.
extlinks = {
    "cpython": (f"https://github.com/python/cpython/blob/v{platform.python_version()}/%s", "%s"),
    "libuv": ("https://docs.libuv.org/en/v1.x/%s", "%s"),
}
extlinks_detect_hardcoded_links = False
manpages_url = "https://man7.org/linux/man-pages/man{section}/{page}.{section}.html"
