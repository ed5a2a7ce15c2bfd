"""Solution regions in the reference source, and the files cut from them.

A region is marked by two comment lines at the indentation of the code:

    <indent># exercise NAME: begin
    <indent>...the solution lines...
    <indent># exercise NAME: end

Rules this file keeps:
  * Markers are found with ``tokenize``, so only real comments count: the
    marker text quoted in a docstring (as above) is not a marker.  A
    comment that looks like a marker but is misspelt is an error, never
    silently ignored.
  * A region is a whole run of sibling statements at the markers'
    indentation: begin and end match, do not nest, share their indentation,
    hold at least one statement, and cut no statement in half (checked on
    the ``ast``).  Replacing it by one ``raise`` therefore leaves valid
    Python, and the starter is compiled to prove it.
  * One exercise may own several regions in one file; all are cut.
  * The starter and the reference differ only inside the exercise's
    regions, so a student can diff them after the fact.  Both keep that
    exercise's markers (they show where to write) and drop every other
    exercise's markers, keeping their code: the file then points at one
    task, and a region of another exercise reads as the plain reference
    code it is.
  * A Cython file (``.pyx``: Part IV) has the same markers, but no ``ast``
    to check them on: there a region is checked by its lines alone (whole
    lines at or inside the markers' indentation, the first at it), and the
    build proves the starter (tinyloop/exercises/build.py).
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import shlex
import shutil
import sys
import textwrap
import threading
import tokenize
from dataclasses import dataclass
from pathlib import Path

from tinyloop.exercises.model import Exercise


# Discussion: CPython 3.11's ast.parse is not safe in two threads at once
# (gh-106905: "AST constructor recursion depth mismatch"), and the checker's
# own tests check a starter and a reference side by side in threads.  Every
# parse in the checker goes through this lock; a parse takes milliseconds.
_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time; raises SyntaxError as it does."""
    with _PARSE_LOCK:
        return ast.parse(source, filename)

__all__ = ["MARKER", "MarkerError", "Region", "check_command", "default_file", "find_all", "find_regions",
           "is_cython", "placeholder", "placeholder_message", "python_command", "reference", "source_path",
           "starter", "unwritten_lines"]

NAME = r"[a-z0-9]+(?:-[a-z0-9]+)*"
# A marker comment; group 1 is the exercise name, group 2 "begin" or "end".
MARKER = re.compile(rf"# exercise ({NAME}): (begin|end)")
_MARKER = MARKER
# Near misses: "#exercise x: begin", "# exercise x begin", "# Exercise X: End".
_LOOKS_LIKE_MARKER = re.compile(r"#\s*exercise\s+\S+?\s*:?\s*(begin|end)\s*$", re.IGNORECASE)


class MarkerError(ValueError):
    """A marker that is malformed, unmatched, nested, or cuts a statement in half.

    ``str(error)`` reads ``FILE:LINE: what is wrong``.
    """

    def __init__(self, filename: str, line: int, message: str) -> None:
        super().__init__(f"{filename}:{line}: {message}")
        self.filename = filename
        self.line = line


@dataclass(frozen=True)
class Region:
    """One marked region: ``begin`` and ``end`` are the 1-based lines of its two markers."""

    name: str
    begin: int
    end: int
    indent: str


def placeholder_message(name: str) -> str:
    """The message of the NotImplementedError a starter raises for exercise ``name``."""
    return f"exercise {name}: see the chapter"


def placeholder(name: str) -> str:
    """The statement that stands for exercise ``name``'s code in a starter file."""
    return f'raise NotImplementedError("{placeholder_message(name)}")'


CYTHON_SUFFIXES = (".pyx", ".pxd", ".pxi")
# A line only Cython has: a cdef/cpdef/ctypedef declaration or a cimport.
_CYTHON_STATEMENT = re.compile(r"^[ \t]*(?:cdef|cpdef|ctypedef|cimport)\b|^[ \t]*from[ \t]+\S+[ \t]+cimport\b",
                               re.MULTILINE)


def is_cython(filename: str | Path) -> bool:
    """Whether ``filename`` is Cython source (``.pyx``, ``.pxd``, ``.pxi``), by its suffix."""
    return str(filename).endswith(CYTHON_SUFFIXES)


def find_regions(source: str, filename: str = "<source>") -> list[Region]:
    """Every marked region in ``source`` (Python text, or Cython when ``filename``
    ends in ``.pyx``, or when no ``filename`` is given and the text is Cython), in
    file order.

    Raises :class:`MarkerError` on a misspelt marker, a begin without its end
    (or the reverse), a region inside another, markers at different
    indentations, an empty region, or a region that is not a run of whole
    statements; ``SyntaxError`` if ``source`` is not valid Python.
    """
    # A SyntaxError first, before tokenize's own errors.  Cython is not
    # Python: its regions are checked line by line (_check_lines).  A caller
    # that names no file gets Cython's rules for text that is not Python and
    # has Cython's own statements.
    cython = is_cython(filename)
    tree = None
    if not cython:
        try:
            tree = parse(source, filename)
        except SyntaxError:
            if filename != "<source>" or not _CYTHON_STATEMENT.search(source):
                raise
            cython = True
    lines = source.splitlines()
    regions: list[Region] = []
    open_: tuple[str, int, str] | None = None  # (name, line, indent) of a begin seen
    comments = _cython_comment_lines(source) if cython else _comment_lines(source)
    for line_no, col, text, nested in comments:
        indent = lines[line_no - 1][:col]
        match = _MARKER.fullmatch(text.rstrip())
        if match is None:
            if _LOOKS_LIKE_MARKER.match(text):
                raise MarkerError(filename, line_no, f"malformed marker {text.strip()!r}; "
                                  "write '# exercise NAME: begin' or '# exercise NAME: end' "
                                  "(NAME in lower case, words joined by '-')")
            continue
        name, kind = match.groups()
        if nested:
            raise MarkerError(filename, line_no, f"the marker of exercise {name} is inside "
                              "brackets; a region holds whole statements, not part of an expression")
        if kind == "begin":
            if open_ is not None:
                raise MarkerError(filename, line_no, f"exercise {name} begins inside exercise "
                                  f"{open_[0]} (begun on line {open_[1]}); regions do not nest")
            open_ = (name, line_no, indent)
            continue
        if open_ is None:
            raise MarkerError(filename, line_no, f"exercise {name} ends, but no region is open")
        if open_[0] != name:
            raise MarkerError(filename, line_no, f"exercise {name} ends, but the open region "
                              f"is exercise {open_[0]} (begun on line {open_[1]})")
        if indent != open_[2]:
            raise MarkerError(filename, line_no, f"the end marker of exercise {name} is not at "
                              f"the indentation of its begin marker (line {open_[1]})")
        regions.append(Region(name, open_[1], line_no, indent))
        open_ = None
    if open_ is not None:
        raise MarkerError(filename, open_[1], f"exercise {open_[0]} begins here and never ends")
    if regions and tree is not None:
        _check_statements(tree, regions, filename)
    elif regions:
        _check_lines(lines, regions, filename)
    return regions


def _cython_comment_lines(source: str):
    """As :func:`_comment_lines`, for Cython: every line whose first non-blank
    character is ``#``, never inside brackets (a marker there fails the build)."""
    for line_no, line in enumerate(source.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith("#"):
            yield line_no, len(line) - len(stripped), stripped, False


def _check_lines(lines: list[str], regions: list[Region], filename: str) -> None:
    """Raise MarkerError unless each region's code lines are whole lines at or
    inside its markers' indentation, the first one at it (Cython: no ast)."""
    for region in regions:
        code = [(number, line) for number, line in enumerate(lines[region.begin:region.end - 1],
                                                           region.begin + 1)
                if line.strip() and not line.lstrip().startswith("#")]
        if not code:
            raise MarkerError(filename, region.begin, f"exercise {region.name}: the region holds "
                              "no statement")
        for number, line in code:
            indent = line[:len(line) - len(line.lstrip())]
            if not indent.startswith(region.indent) or (number == code[0][0]
                                                        and indent != region.indent):
                raise MarkerError(filename, number, f"exercise {region.name}: every statement "
                                  "of the region must start at the markers' indentation")


def _comment_lines(source: str):
    """``(line, column, text, in_brackets)`` of every comment alone on its line."""
    depth = 0  # open brackets: a comment inside them is inside an expression
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif token.type == tokenize.COMMENT and not token.line[:token.start[1]].strip():
            yield token.start[0], token.start[1], token.string, depth > 0


def _check_statements(tree: ast.Module, regions: list[Region], filename: str) -> None:
    """Raise MarkerError unless each region is a run of sibling statements at its indentation."""
    parents: dict[ast.AST, ast.AST] = {}
    statements: list[ast.stmt] = []
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
        if isinstance(node, ast.stmt):
            statements.append(node)

    def enclosing(node: ast.AST) -> ast.AST | None:
        """The statement around ``node`` (through except handlers and match cases)."""
        node = parents.get(node)
        while node is not None and not isinstance(node, ast.stmt):
            node = parents.get(node)
        return node

    def span(node: ast.stmt) -> tuple[int, int]:
        decorators = getattr(node, "decorator_list", [])
        first = min([node.lineno] + [d.lineno for d in decorators])
        return first, node.end_lineno or node.lineno

    for region in regions:
        inside = [s for s in statements if region.begin < span(s)[0] and span(s)[1] < region.end]
        outermost = [s for s in inside if enclosing(s) not in inside]
        if not outermost:
            raise MarkerError(filename, region.begin, f"exercise {region.name}: the region holds "
                              "no statement")
        ancestors = set()
        node = parents[outermost[0]]
        while node in parents:
            ancestors.add(node)
            node = parents[node]
        for s in statements:
            first, last = span(s)
            # Only a statement around the whole region may start before it and
            # end inside or after it; none may start inside and end after it.
            crosses = ((first < region.begin <= last and s not in ancestors)
                       or region.begin < first < region.end < last)
            if crosses:
                raise MarkerError(filename, region.begin, f"exercise {region.name}: the region "
                                  f"cuts the statement on lines {first}-{last} in half")
        for s in outermost:
            if parents[s] is not parents[outermost[0]] or s.col_offset != len(region.indent):
                raise MarkerError(filename, s.lineno, f"exercise {region.name}: every statement "
                                  "of the region must start at the markers' indentation")


def find_all(directory: Path) -> list[tuple[Path, Region]]:
    """Every region in the ``*.py`` and ``*.pyx`` files under ``directory``, as
    ``(file, region)``.

    Raises :class:`MarkerError` (or ``SyntaxError``) for the first bad file.
    """
    found = []
    for path in sorted([*directory.rglob("*.py"), *directory.rglob("*.pyx")]):
        text = path.read_text()
        if "exercise" in text:  # most files have no marker: skip tokenizing them
            found += [(path, region) for region in find_regions(text, str(path))]
    return found


def source_path(module: str) -> Path:
    """The file of reference module ``module`` (dotted name), found without importing it.

    A dotted name may also name a Cython source file in a package
    (``tinyloop.uv.tcp`` is ``tinyloop/uv/tcp.pyx``, a file that
    ``_loop.pyx`` includes and that has no module of its own); a ``.py``
    file comes first.  Raises ``ModuleNotFoundError`` if there is neither.
    """
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    parent, _, leaf = module.rpartition(".")
    try:
        package = importlib.util.find_spec(parent) if parent else None
    except ModuleNotFoundError:
        package = None
    for location in (package.submodule_search_locations or []) if package else []:
        candidate = Path(location) / f"{leaf}.pyx"
        if candidate.is_file():
            return candidate
    raise ModuleNotFoundError(f"no Python or Cython source for module {module!r}", name=module)


def _cut(source: str, filename: str, name: str, keep_solution: bool) -> str:
    """``source`` with exercise ``name``'s regions kept or replaced by the placeholder,
    and every other exercise's marker lines removed."""
    regions = find_regions(source, filename)
    if not any(r.name == name for r in regions):
        raise MarkerError(filename, 1, f"no region of exercise {name} in this file")
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()     # 0-based indices of lines to leave out
    replace: dict[int, str] = {}
    for r in regions:
        if r.name != name:
            drop.update((r.begin - 1, r.end - 1))
        elif not keep_solution:
            drop.update(range(r.begin, r.end - 1))
            replace[r.begin] = f"{r.indent}{placeholder(name)}\n"
    out = []
    for i, line in enumerate(lines):
        if i in replace:
            out.append(replace[i])
        if i not in drop:
            out.append(line)
    return "".join(out)


def python_command() -> str:
    """How to name this interpreter in a command the reader types: ``python`` when
    that already finds it (the environment is active), else its path (relative to
    the current directory when it lies below it, e.g. ``.venv/bin/python``)."""
    here = Path(sys.executable)
    found = shutil.which("python")
    if found and Path(found).parent.resolve() == here.parent.resolve():
        return "python"
    try:
        return str(here.relative_to(Path.cwd()))
    except ValueError:
        return str(here)


def check_command(name: str, filename: str | None = None, python: str = "python") -> str:
    """The shell command that grades ``filename`` (``./NAME.py`` when None) for exercise
    ``name``, run by the interpreter ``python`` (the book's commands assume the
    project's environment is active, so that ``python`` is .venv's)."""
    command = f"{shlex.quote(python)} -m tinyloop check {name}"
    if filename is None or filename in (f"{name}.py", f"./{name}.py"):
        return command
    return f"{command} {shlex.quote(filename)}"


def _header(exercise: Exercise, filename: str | None, kind: str) -> str:
    wrap = textwrap.TextWrapper(width=77, initial_indent="# ", subsequent_indent="# ")
    what = ("Write your code between its markers below, in place of the line that "
            "raises NotImplementedError, then grade it with:") if kind == "starter" else (
            "This is the reference solution; it passes:")
    lines = wrap.wrap(f"Exercise {exercise.name} (chapter {exercise.chapter}): {exercise.title}")
    lines += ["#"] + wrap.wrap(" ".join(exercise.instructions.split()))
    lines += ["#"] + wrap.wrap(what)
    lines += ["#", f"#     {check_command(exercise.name, filename)}", "#"]
    lines += wrap.wrap("(`python` is the project's: run `source .venv/bin/activate` in the "
                       "checkout once per terminal, or write `.venv/bin/python` instead.)")
    lines += ["#"]
    if exercise.extension:
        source = source_path(exercise.module).name
        lines += wrap.wrap(f"This is Cython. The checker builds {exercise.extension} with this "
                           f"file in place of {source} (a minute at most), then runs the tests "
                           f"on that build; the rest of the file is {source}'s reference code.")
    else:
        lines += wrap.wrap(f"The checker runs this file in place of {exercise.module}; the rest "
                           "of it is that module's reference code.")
    return "\n".join(lines) + "\n\n"


def _with_header(exercise: Exercise, filename: str | None, kind: str) -> str:
    path = source_path(exercise.module)
    body = _cut(path.read_text(), str(path), exercise.name, keep_solution=(kind == "reference"))
    # A shebang or coding cookie must stay on the first two lines.
    lines = body.splitlines(keepends=True)
    keep = 0
    while keep < min(2, len(lines)) and (lines[keep].startswith("#!") or
                                          re.match(r"^[ \t\f]*#.*?coding[:=]", lines[keep])):
        keep += 1
    text = "".join(lines[:keep]) + _header(exercise, filename, kind) + "".join(lines[keep:])
    if not is_cython(path):  # Cython is proved by its build (tinyloop/exercises/build.py)
        compile(text, filename or default_file(exercise), "exec")  # a bad region fails here
    return text


def default_file(exercise: Exercise) -> str:
    """The file ``start`` writes and ``check`` grades when given none: ``NAME.py``,
    or ``NAME.pyx`` for a Cython exercise."""
    return f"{exercise.name}.pyx" if exercise.extension else f"{exercise.name}.py"


def starter(exercise: Exercise, filename: str | None = None) -> str:
    """The starter file's text for ``exercise``: the reference module with the exercise's
    regions replaced by :func:`placeholder`, under a header naming the exercise, its
    chapter and the check command for ``filename`` (``./NAME.py`` when None).

    Raises :class:`MarkerError` if the module's markers are wrong or it has no
    region of this exercise, ``ModuleNotFoundError`` if the module has no source.
    """
    return _with_header(exercise, filename, "starter")


def reference(exercise: Exercise, filename: str | None = None) -> str:
    """The reference solution as a file a student could submit: :func:`starter` with
    the solution left in place.  Raises as :func:`starter` does."""
    return _with_header(exercise, filename, "reference")


def unwritten_lines(text: str, name: str) -> list[int]:
    """Lines (1-based) of ``text`` that still hold exercise ``name``'s placeholder."""
    stub = placeholder(name)
    return [i for i, line in enumerate(text.splitlines(), 1) if line.strip() == stub]
