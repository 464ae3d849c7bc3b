"""A measured ratio (tokens per second, a hit rate, CPU cores) that is 0
where its denominator is: nothing was measured, and a benchmark's table
shows 0 rather than failing on a division by zero."""

from __future__ import annotations


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0
