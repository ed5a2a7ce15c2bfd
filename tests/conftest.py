"""Shared test setup.

The exercise checker runs these tests with ``TINYLOOP_OVERRIDE`` naming a
student's file; applying it here, before any test module imports tinyloop's
stage modules, makes the in-process tests use the student's code too (the
servers the tests start apply it themselves, in ``stages.load``).
"""

from __future__ import annotations

import tinyloop._override

tinyloop._override.apply_override()
