"""Every exercise of the book, gathered from the chapters' catalogs.

Each chapter's author keeps one module ``tinyloop/exercises/catalog_<chapter>.py``
that defines ``EXERCISES = [Exercise(...), ...]``.  This module finds them
all by listing the package (nothing here names a chapter), so adding a
chapter's exercises touches no shared file.

Rules this module keeps:
  * Names are unique across the book: a duplicate is an error that names
    both catalogs, raised on first use rather than letting one shadow the
    other.
  * Order is reading order: chapters in the order of the stage table
    (tinyloop/stages.py), chapters it does not know after them, by name;
    within a chapter, the catalog's own order.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

import tinyloop.exercises
from tinyloop import stages
from tinyloop.exercises.model import Exercise

__all__ = ["CatalogError", "by_chapter", "chapters", "collect", "exercises", "get"]


class CatalogError(Exception):
    """A catalog module is malformed, or two exercises share a name."""


@functools.cache
def exercises() -> tuple[Exercise, ...]:
    """Every exercise, in reading order.  Raises :class:`CatalogError`."""
    modules = [importlib.import_module(f"tinyloop.exercises.{info.name}")
               for info in pkgutil.iter_modules(tinyloop.exercises.__path__)
               if info.name.startswith("catalog_")]
    return collect(modules)


def collect(modules: Iterable[ModuleType]) -> tuple[Exercise, ...]:
    """The exercises the catalog ``modules`` declare, checked and in reading order.

    Raises :class:`CatalogError` if a module has no ``EXERCISES`` list, holds
    something that is not an Exercise, or two exercises share a name.
    """
    found: list[Exercise] = []
    source: dict[str, str] = {}  # exercise name -> catalog module that declares it
    for module in modules:
        declared = getattr(module, "EXERCISES", None)
        if not isinstance(declared, (list, tuple)):
            raise CatalogError(f"{module.__name__} must define EXERCISES, a list of Exercise")
        for exercise in declared:
            if not isinstance(exercise, Exercise):
                raise CatalogError(f"{module.__name__}: {exercise!r} is not an Exercise")
            if exercise.name in source:
                raise CatalogError(f"exercise {exercise.name!r} is declared twice: in "
                                   f"{source[exercise.name]} and in {module.__name__}")
            source[exercise.name] = module.__name__
            found.append(exercise)
    order: dict[str, int] = {}
    for stage in stages.STAGES:
        order.setdefault(stage.chapter, len(order))
    # sorted() is stable: within a chapter, the catalog's order stays.
    return tuple(sorted(found, key=lambda e: (order.get(e.chapter, len(order)), e.chapter)))


def chapters() -> list[str]:
    """The chapters that set exercises, in reading order."""
    return list(dict.fromkeys(e.chapter for e in exercises()))


def by_chapter(chapter: str) -> list[Exercise]:
    """The exercises chapter ``chapter`` sets (a file name in ``chapters/`` without
    ``.md``), in the catalog's order; an empty list if it sets none."""
    return [e for e in exercises() if e.chapter == chapter]


def get(name: str) -> Exercise:
    """The exercise called ``name``; ``KeyError`` with a readable message if there is none."""
    for exercise in exercises():
        if exercise.name == name:
            return exercise
    names = [e.name for e in exercises()]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise KeyError(f"no exercise called {name!r}{hint} "
                   "(`python -m tinyloop exercises` lists them)")
