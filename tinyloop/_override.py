"""How a student's file takes the place of a reference module.

The exercise checker sets ``TINYLOOP_OVERRIDE=tinyloop.raw.connection=/tmp/x.py``
(several pairs may be joined with ``os.pathsep``) in the environment of the
tests and of every server they start.  ``apply_override()`` loads each file
under the module's real name and puts it in ``sys.modules`` before anything
imports the reference, so the rest of tinyloop uses the student's code
without knowing.  This is why stage packages keep their ``__init__.py``
free of imports: a package that imported its own modules eagerly would
load the reference first.
"""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["ENV", "apply_override", "parse"]

ENV = "TINYLOOP_OVERRIDE"


def parse(value: str) -> dict[str, str]:
    """``"mod.a=/p/a.py:mod.b=/p/b.py"`` -> ``{"mod.a": "/p/a.py", ...}``; raises ValueError."""
    pairs: dict[str, str] = {}
    for item in filter(None, value.split(os.pathsep)):
        module, sep, path = item.partition("=")
        if not sep or not module or not path:
            raise ValueError(f"{ENV}: expected MODULE=FILE, got {item!r}")
        pairs[module] = path
    return pairs


def apply_override(environ: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """Load every overriding file named in ``environ``; return the module names replaced.

    A module already in ``sys.modules`` is left alone (it was loaded already,
    from the override or not).  Raises ``ImportError`` if a file is missing.
    """
    replaced = []
    for module_name, path in parse(environ.get(ENV, "")).items():
        if module_name in sys.modules:
            continue
        if not os.path.exists(path):
            raise ImportError(f"{ENV}: no file {path!r} for {module_name}")
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        parent, _, child = module_name.rpartition(".")
        if parent:
            setattr(importlib.import_module(parent), child, module)
        replaced.append(module_name)
    return replaced
