# benchmarks/harness/summary.py
"""One noise rule and one summary of repeated measurements, for every experiment.

Rules this module keeps:

  * A figure is the median of the repetitions that succeeded, never the
    mean: one repetition disturbed by the machine moves a mean, not a median.
  * Its spread is the smallest and the largest of those repetitions.
  * A row is *noisy* when its largest value is more than ``1 + NOISE`` times
    its smallest (two or more repetitions); its median is then a weak figure,
    and the tables say so.

Standard library only, and no I/O: ``benchmarks.report`` (which the book
imports while it builds) imports this.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

__all__ = ["NOISE", "is_noisy", "median", "median_range", "slope", "spread", "summarize"]

# Repetitions further apart than this (max > min x 1.25) make a row noisy.
NOISE = 0.25


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def spread(values: Iterable[float | None]) -> list[float] | None:
    """``[min, max]`` of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    return [min(present), max(present)] if present else None


def is_noisy(low_high: list[float] | tuple[float, float] | None) -> bool:
    """Whether a spread ``[min, max]`` is wider than NOISE allows (max > min x (1 + NOISE))."""
    return low_high is not None and low_high[0] > 0 and low_high[1] > low_high[0] * (1 + NOISE)


def median_range(values: Iterable[float | None]) -> dict | None:
    """``{"median", "min", "max"}`` of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    return {"median": statistics.median(present), "min": min(present), "max": max(present)} if present else None


def summarize(values: Iterable[float | None]) -> dict | None:
    """``{"median", "min", "max", "noisy"}`` of the values that are not None; None if none."""
    present = [value for value in values if value is not None]
    if not present:
        return None
    low_high = spread(present)
    return {"median": statistics.median(present), "min": low_high[0], "max": low_high[1],
            "noisy": len(present) >= 2 and is_noisy(low_high)}


def slope(points: Iterable[tuple[float, float]]) -> float | None:
    """The least-squares slope of y on x through ``points`` ``(x, y)``; None with fewer than two x.

    What one more of x adds to y (a connection's bytes, an idle descriptor's
    microseconds): whatever every point shares, such as the interpreter's
    own memory, drops out of it.
    """
    points = list(points)
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    return (sum((x - mean_x) * (y - mean_y) for x, y in points)
            / sum((x - mean_x) ** 2 for x, _ in points))
