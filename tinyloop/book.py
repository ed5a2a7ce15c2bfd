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
    only under ``docs/_build/`` (ignored by git), so ``git status`` stays
    clean.  ``--class`` makes the class edition in a folder of its own.
  * ``--serve`` serves the built book on 127.0.0.1 only, until Ctrl-C.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "build", "main", "serve"]

ROOT = Path(__file__).resolve().parent.parent
"""The checkout this package was imported from (chapters/ and docs/ live there)."""

INSTALL = "pip install -e '.[dev]'"


def build(out: Path | None = None, edition: str = "reader") -> tuple[int, Path]:
    """Build the book's ``edition`` (``"reader"`` or ``"class"``) into ``out``.

    ``out`` defaults to ``docs/_build/html`` (``docs/_build/class`` for the
    class edition).  Returns ``(exit status, path of index.html)``; the
    status is Sphinx's, or 2 when this is not a checkout or Sphinx is missing
    (the message on stderr says what to do).
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
    # The doctrees are kept per edition, beside the output, so switching
    # edition never reuses the other's (docs/_ext/book_solutions.py also
    # re-reads every source when the edition changes).
    command = [sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html",
               "-c", str(docs), "-d", str(out.parent / f".doctrees-{folder}")]
    if edition == "class":
        command += ["-t", "class"]
    done = subprocess.run([*command, str(chapters), str(out)], cwd=ROOT, stdin=subprocess.DEVNULL)
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
