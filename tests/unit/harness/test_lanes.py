"""`make test`'s two lanes: the run's exit status from theirs."""

from __future__ import annotations

import pytest

from harness.lanes import outcome


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([0, 0], 0),
        ([0, 1], 1),
        ([2, 0], 2),
        ([1, 2], 1),
        ([0, 5], 0),  # a selection that leaves one lane empty
        ([5, 1], 1),
        ([5, 5], 5),  # nothing collected at all
    ],
)
def test_the_run_fails_when_a_lane_fails(codes: list[int], expected: int) -> None:
    assert outcome(codes) == expected
