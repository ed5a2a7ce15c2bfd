# benchmarks/harness/summary.py
"""One noise rule and one summary of repeated measurements, for every experiment.

A figure is the median of the repetitions that succeeded (one disturbed
repetition moves a mean, not a median), its spread their min and max; a row
is *noisy* when its largest value is over ``1 + NOISE`` times its smallest.
Standard library only, no I/O: the book imports this while it builds.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

__all__ = ["NOISE", "is_noisy", "median", "slope", "summarize"]

# Repetitions further apart than this (max > min x 1.25) make a row noisy.
NOISE = 0.25


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def is_noisy(low_high: list[float] | tuple[float, float] | None) -> bool:
    """Whether a spread ``[min, max]`` is wider than NOISE allows (max > min x (1 + NOISE))."""
    return low_high is not None and low_high[0] > 0 and low_high[1] > low_high[0] * (1 + NOISE)


def summarize(values: Iterable[float | None]) -> dict | None:
    """``{"median", "min", "max", "noisy"}`` of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    if not present:
        return None
    low, high = min(present), max(present)
    return {"median": statistics.median(present), "min": low, "max": high,
            "noisy": len(present) >= 2 and is_noisy([low, high])}


def slope(points: Iterable[tuple[float, float]]) -> float | None:
    """The least-squares slope of y on x through ``points`` ``(x, y)``; None with fewer than two x:
    what one more of x adds to y, whatever every point shares dropping out."""
    points = list(points)
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    return (sum((x - mean_x) * (y - mean_y) for x, y in points)
            / sum((x - mean_x) ** 2 for x, _ in points))
