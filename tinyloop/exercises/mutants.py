"""Wrong solutions of the kinds students write, made from the reference by
editing its text: they measure the checker where cosmic-ray's operators
(an operator swapped, a number nudged) do not reach.

  condition-true, condition-false   an `if`/`elif`/`while` test replaced by
                                    True or False, or one operand of a
                                    returned `and` (`or`) made True (False):
                                    a case not told apart
  buffer-not-emptied                a statement that takes bytes out of a
                                    buffer (`del buf[:n]`, `.clear()`,
                                    `.popleft()`, a tail kept) left out
  offset-not-advanced               an augmented assignment (`x += n`,
                                    `size -= sent`) or a skip of what was
                                    sent (`data = data[sent:]`) left out:
                                    a count or offset that does not move
  registration-not-removed          a call that removes a registration
                                    (remove_reader/writer, unregister,
                                    uv_*_stop, Py_DECREF) left out

Rules this module keeps:
  * Text in, text out, one line changed per mutant, indentation kept, so
    the operators apply to Cython (.pyx) as to Python: `pass` and `True`
    are both languages' words.
  * Only lines inside the exercise's marked regions are changed, and a
    Python mutant that does not compile is dropped (never counted).
  * Standard library only (the package's rule); the runner that grades
    the mutants is scripts/mutation.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinyloop.exercises import markers

__all__ = ["OPERATORS", "Mutant", "mutants"]

OPERATORS = ("condition-true", "condition-false", "buffer-not-emptied", "offset-not-advanced",
             "registration-not-removed")

_CONDITION = re.compile(r"^(?P<indent>\s*)(?P<kw>if|elif|while)\s+(?P<test>.+?):\s*(?P<comment>#.*)?$")
_BUFFER = re.compile(r"^\s*(del\s+\S+\[.*\]|\S+\.(clear|popleft)\(\)|\S+\[0\]\s*=\s*memoryview\(.*)\s*(#.*)?$")
_AUGMENTED = re.compile(r"^\s*[\w.\[\]]+\s*[-+]=\s*\S.*$")
_SKIP = re.compile(r"^\s*(?P<name>[\w.]+)\s*=\s*.*\b(?P=name)\[\w*\s*:.*\]")  # data = data[sent:]
_REMOVAL = re.compile(r"^\s*(\w+\s*=\s*)?[\w.]*\b(remove|remove_reader|remove_writer|_remove_reader|_remove_writer"
                      r"|unregister|uv_idle_stop|uv_timer_stop|uv_read_stop|uv_poll_stop|Py_DECREF)\(.*\)\s*(#.*)?$")


@dataclass(frozen=True)
class Mutant:
    """One wrong solution: ``line`` (1-based) of the reference became ``code``."""

    operator: str
    line: int
    original: str
    code: str
    text: str  # the whole mutated file


def _statement_lines(lines: list[str], begin: int, end: int) -> list[int]:
    """0-based indices of the lines strictly between the markers that hold code."""
    return [i for i in range(begin, end - 1) if lines[i].strip() and not lines[i].lstrip().startswith("#")]


def _replace_statement(line: str) -> str:
    indent = line[:len(line) - len(line.lstrip())]
    return f"{indent}pass  # mutant: was {line.strip()}"


def _changes(line: str) -> list[tuple[str, str]]:
    found = []
    match = _CONDITION.match(line)
    if match and match["test"].strip() not in ("True", "False"):
        for word, name in (("True", "condition-true"), ("False", "condition-false")):
            if match["kw"] == "while" and word == "True":
                continue  # a loop that never ends says only "time-out"
            found.append((name, f"{match['indent']}{match['kw']} {word}:"))
    found += _conjuncts(line)
    if line.rstrip().endswith(":"):
        return found  # a block opener: leaving it out would not parse
    if _BUFFER.match(line):
        found.append(("buffer-not-emptied", _replace_statement(line)))
    elif _AUGMENTED.match(line) or _SKIP.match(line):
        found.append(("offset-not-advanced", _replace_statement(line)))
    if _REMOVAL.match(line):
        found.append(("registration-not-removed", _replace_statement(line)))
    return found


_RETURN_BOOLEAN = re.compile(r"^(?P<head>\s*return\s+)(?P<expr>.+?)\s*(?P<comment>#.*)?$")


def _conjuncts(line: str) -> list[tuple[str, str]]:
    """``return a and b and c``: each operand in turn made True (for ``and``) or
    False (for ``or``), a case of the condition forgotten."""
    match = _RETURN_BOOLEAN.match(line)
    if not match:
        return []
    expr = match["expr"]
    for word, value, name in ((" and ", "True", "condition-true"), (" or ", "False", "condition-false")):
        parts = expr.split(word)
        if len(parts) < 2 or any(p.count("(") != p.count(")") for p in parts):
            continue
        return [(name, match["head"] + word.join(parts[:i] + [value] + parts[i + 1:]))
                for i in range(len(parts))]
    return []


def mutants(exercise_name: str, text: str, filename: str = "solution.py") -> list[Mutant]:
    """Every mutant of ``text`` (a reference solution of exercise ``exercise_name``)
    our operators make in the exercise's regions, in line order."""
    lines = text.splitlines(keepends=True)
    python = not markers.is_cython(filename)
    found = []
    for region in markers.find_regions(text, filename):
        if region.name != exercise_name:
            continue
        for index in _statement_lines(lines, region.begin, region.end):
            line = lines[index].rstrip("\n")
            for operator, code in _changes(line):
                changed = lines[:index] + [code + "\n"] + lines[index + 1:]
                mutated = "".join(changed)
                if python:
                    try:
                        compile(mutated, filename, "exec")
                    except SyntaxError:
                        continue
                found.append(Mutant(operator, index + 1, line.strip(), code.strip(), mutated))
    return found
