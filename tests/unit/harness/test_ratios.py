"""harness.ratios: a ratio, and 0 where nothing was measured."""

from __future__ import annotations

from harness.ratios import ratio


def test_a_ratio_and_nothing_measured() -> None:
    assert ratio(3, 2) == 1.5
    assert ratio(0, 4) == 0.0
    assert ratio(3, 0) == 0.0
