"""What an exercise is.  The solution lives in the reference source between
marker comments; this record says where, what the student is asked to do,
and which tests grade it.  Starter, reference and tests can then never
disagree: the starter is the reference with the region cut out, and the
tests are the stage's own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Exercise", "PROPERTIES"]

# Loop properties the checker can measure on a running server, besides tests.
PROPERTIES = ("single_thread", "idle_cpu", "no_fd_growth", "slow_client")


@dataclass(frozen=True)
class Exercise:
    """One exercise.

    - ``name``: what ``python -m tinyloop check NAME`` takes, and the marker
      name (``# exercise NAME: begin`` / ``# exercise NAME: end``)
    - ``chapter``: the chapter that sets it (a file name in ``chapters/``
      without ``.md``)
    - ``title``: one line
    - ``module``: the reference module holding the marked region(s), e.g.
      ``tinyloop.raw.connection``; for a Cython exercise, the dotted name of
      the ``.pyx`` file (``tinyloop.uv.tcp`` is ``tinyloop/uv/tcp.pyx``)
    - ``instructions``: what to write, in a few sentences a student
      understands; any wording a test requires (an error message) is given here
    - ``tests``: pytest arguments, relative to the repository root, that grade
      the solution: the tests of every stage that runs the region's code
    - ``stage``: the server stage whose loop properties are checked, or ``None``
    - ``properties``: which of ``PROPERTIES`` to check on that stage's server
    - ``extension``: for a Cython exercise, the compiled module the ``.pyx``
      file is built into (``tinyloop.uv._loop``); the checker builds it with
      the student's file (tinyloop/exercises/build.py) and runs the tests on
      that build.  ``None`` for a Python exercise.
    """

    name: str
    chapter: str
    title: str
    module: str
    instructions: str
    tests: tuple[str, ...]
    stage: str | None = None
    properties: tuple[str, ...] = ()
    extension: str | None = None

    def __post_init__(self) -> None:
        unknown = set(self.properties) - set(PROPERTIES)
        if unknown:
            raise ValueError(f"exercise {self.name}: unknown properties {sorted(unknown)}")
        if self.properties and self.stage is None:
            raise ValueError(f"exercise {self.name}: properties need a stage")
