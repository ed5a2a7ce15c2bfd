# benchmarks/harness/layout.py
"""The core layout of an experiment with several parts (load generator, proxy, app, database):
which cores each part may use, as taskset(1) lists, given on the command line as ``--cpus-PART``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
from collections.abc import Iterable

__all__ = ["Layout", "cpu_list", "cpu_set", "taskset", "usable_cpus"]


def cpu_list(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: taskset(1)'s list format, shortest form (the inverse of cpu_set)."""
    runs = [[cpu for _, cpu in run]  # consecutive cpus share cpu - index
            for _, run in itertools.groupby(enumerate(sorted(set(cpus))), lambda pair: pair[1] - pair[0])]
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def cpu_set(cpus: str | Iterable[int]) -> set[int]:
    """``"0,2-3"`` or ``[0, 2, 3]`` -> ``{0, 2, 3}`` (taskset(1)'s list format)."""
    if not isinstance(cpus, str):
        return {int(cpu) for cpu in cpus}
    result: set[int] = set()
    for part in cpus.split(","):
        low, _, high = part.strip().partition("-")
        result.update(range(int(low), int(high or low) + 1))
    return result


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def taskset(cpus: str | None) -> list[str]:
    """``["taskset", "-c", cpus]``, to put before a command (every process it forks inherits the
    mask); ``[]`` when ``cpus`` is None (unpinned) or taskset is not installed."""
    return ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []


class Layout:
    """Which cores each part of a run may use: ``Layout(load="1", app="0", db=None)``.

    Each part is a taskset(1) list ("1", "0-2,5") or None (unpinned), read as an attribute
    (``layout.db``).  The experiment records ``cpus`` beside its figures.
    """

    def __init__(self, **cpus: str | None) -> None:
        self.cpus = cpus
        self.__dict__.update(cpus)

    @property
    def key(self) -> str:
        """The layout in words, in its parts' order: ``"load=1 proxy=0 app=0 db=any"``."""
        return " ".join(f"{part}={cpus or 'any'}" for part, cpus in self.cpus.items())

    def prefix(self, part: str) -> list[str]:
        """:func:`taskset` for ``part``'s cores."""
        return taskset(self.cpus[part])

    def cores(self, part: str) -> int:
        """How many cores ``part`` may use (every usable one when unpinned)."""
        cpus = self.cpus[part]
        return len(cpu_set(cpus)) if cpus else len(usable_cpus())

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, parts: dict[str, str],
                      defaults: dict[str, str | None]) -> None:
        """Give ``parser`` a ``--cpus-PART`` option per part; ``parts`` says what each part is."""
        for part, what in parts.items():
            parser.add_argument(f"--cpus-{part}", metavar="CPUS",
                                help=f"cores for {what}: a taskset list (0 / 1,2 / 0-3), or any "
                                     f"(default {defaults[part] or 'any'})")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace, defaults: dict[str, str | None]) -> Layout:
        """The ``--cpus-PART`` options of ``args``: one left out takes its default; ``any``/``none``: unpinned."""
        def pick(part: str) -> str | None:
            given = getattr(args, f"cpus_{part}", None)
            return defaults[part] if given is None else (None if given.lower() in ("any", "none") else given)
        return cls(**{part: pick(part) for part in defaults})
