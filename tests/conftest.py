"""Shared test setup.

The exercise checker runs these tests with ``TINYLOOP_OVERRIDE`` naming a
student's file; applying it here, before any test module imports tinyloop's
stage modules, makes the in-process tests use the student's code too (the
servers the tests start apply it themselves, in ``stages.load``).
"""

from __future__ import annotations

import tinyloop._override

tinyloop._override.apply_override()

import importlib  # noqa: E402

import pytest  # noqa: E402

from tinyloop import stages  # noqa: E402


def require_stage(name: str) -> None:
    """Skip the calling test if stage ``name``'s module has not been written yet.

    THE ONE PLACE that skips unbuilt stages: once every stage in
    ``tinyloop.stages.STAGES`` exists, delete the ``except`` branch (or this
    whole function's body) and every stage is tested without exception.
    Only a missing module is skipped; a module that exists but fails to
    import is an error, and fails the test.
    """
    module = stages.get(name).module
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and (module + ".").startswith(error.name + "."):
            pytest.skip(f"stage {name}: stage not built yet ({module})")
        raise
