# tinyloop/book.py
"""``python -m tinyloop book [--serve]``: build the book from this checkout and open it.

The book is read built, not as the ``.md`` files in ``chapters/``: its
listings are directives that include the source when the book is built.

Rules this file keeps:
  * Standard library only, like the rest of the package: Sphinx (a dev
    dependency) runs in a child process, ``python -m sphinx``, and when it is
    not installed the command says how to install it instead of failing on
    an import.
  * The build is incremental (Sphinx re-reads only what changed) and writes
    only under its output folder (``docs/_build/html`` by default, ignored
    by git): the HTML, Sphinx's cache (``.doctrees``) and the source it reads
    (``.source``, see :func:`stage`), so ``git status`` stays clean.
    ``--class`` makes the class edition in a folder of its own.
  * ``--serve`` serves the built book on 127.0.0.1 only, until Ctrl-C.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "build", "main", "serve", "sphinx_command", "stage"]

ROOT = Path(__file__).resolve().parent.parent
"""The checkout this package was imported from (chapters/ and docs/ live there)."""

INSTALL = "pip install -e '.[dev]'"


def stage(out: Path, chapters: Path | None = None) -> Path:
    """The source folder Sphinx reads for a build into ``out``: ``out/.source/chapters``.

    It holds a copy of ``chapters`` (default the checkout's ``chapters/``;
    copied with their times, and only the files that changed, so Sphinx
    re-reads only what changed), and ``out/.source`` a link to each sibling
    of it (``tinyloop/``, ``benchmarks/``...), so a listing's
    ``../tinyloop/...`` resolves as in the checkout.  The API pages
    autosummary generates then land in ``out/.source/chapters/api/``, not in
    the checkout.  A file removed from ``chapters`` is removed from the copy.
    Returns the staged ``chapters`` folder.  (Copies, not links: MyST
    resolves a link between chapters through the file's real path.)
    """
    chapters = (chapters or ROOT / "chapters").resolve()
    top = out.resolve() / ".source"
    staged = top / "chapters"
    staged.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in chapters.parent.iterdir()
              if entry.name not in (chapters.name, ".git", ".venv")}
    for link in top.iterdir():
        if link.is_symlink() and wanted.get(link.name) != Path(os.readlink(link)):
            link.unlink()
    for name, entry in wanted.items():
        if not (top / name).is_symlink() and not (top / name).exists():
            (top / name).symlink_to(entry)
    sources = {path.relative_to(chapters) for path in chapters.rglob("*")
               if path.is_file() and path.relative_to(chapters).parts[0] != "api"}
    for path in staged.rglob("*"):
        relative = path.relative_to(staged)
        if path.is_file() and relative.parts[0] != "api" and relative not in sources:
            path.unlink()
    for relative in sources:
        source, copy = chapters / relative, staged / relative
        status = source.stat()
        if copy.exists() and (copy.stat().st_size, copy.stat().st_mtime_ns) == (status.st_size, status.st_mtime_ns):
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy)
    return staged


def sphinx_command(out: Path, *extra: str, chapters: Path | None = None) -> list[str]:
    """The Sphinx command that builds ``chapters`` (staged, :func:`stage`) into ``out`` as HTML.

    Warnings are errors and every reference must resolve (``-W -n``);
    ``extra`` goes before the folders (``-t class``, ``-D name=value``).
    """
    return [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
            "-c", str(ROOT / "docs"), "-d", str(out / ".doctrees"), *extra,
            str(stage(out, chapters)), str(out)]


def build(out: Path | None = None, edition: str = "reader") -> tuple[int, Path]:
    """Build the book's ``edition`` (``"reader"`` or ``"class"``) into ``out``.

    ``out`` defaults to ``docs/_build/html`` (``docs/_build/class`` for the
    class edition); nothing is written outside it.  Returns ``(exit status,
    path of index.html)``; the status is Sphinx's, or 2 when this is not a
    checkout or Sphinx is missing (the message on stderr says what to do).
    """
    chapters, docs = ROOT / "chapters", ROOT / "docs"
    folder = "html" if edition == "reader" else "class"
    out = out if out is not None else docs / "_build" / folder
    index = out / "index.html"
    if not (chapters / "index.md").exists() or not (docs / "conf.py").exists():
        print(f"tinyloop book: no chapters/ and docs/ beside {ROOT / 'tinyloop'}: the book builds "
              "from a checkout of the repository", file=sys.stderr)
        return 2, index
    if importlib.util.find_spec("sphinx") is None:
        print(f"tinyloop book: Sphinx is not installed in {sys.executable}; install the "
              f"development tools with `{INSTALL}` (the README's set-up does it)", file=sys.stderr)
        return 2, index
    # The doctrees are kept in each edition's folder, so switching edition
    # never reuses the other's (docs/_ext/book_solutions.py also re-reads
    # every source when the edition changes).
    command = sphinx_command(out, *(["-t", "class"] if edition == "class" else []))
    done = subprocess.run(command, cwd=ROOT, stdin=subprocess.DEVNULL)
    return done.returncode, index


def serve(directory: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server for ``directory`` on 127.0.0.1:``port`` (0 picks one); not yet serving.

    Raises OSError when the port cannot be bound (bind(2)).
    """
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def main(out: Path | None = None, edition: str = "reader", serve_port: int | None = None) -> int:
    """The ``book`` command: build, print the page to open, serve it if asked; returns the exit status."""
    status, index = build(out, edition)
    if status != 0:
        if index.exists():
            print(f"tinyloop book: the build failed (status {status}); {index} is the last good one",
                  file=sys.stderr)
        return status
    if serve_port is None:
        print(f"The book is built: open {index.as_uri()}")
        return 0
    try:
        server = serve(index.parent, serve_port)
    except OSError as error:
        print(f"tinyloop book: cannot serve on 127.0.0.1:{serve_port}: {error.strerror}", file=sys.stderr)
        return 1
    print(f"Serving the book at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
