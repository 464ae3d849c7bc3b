"""Paired rounds: the A B B A order rotated each round (balanced from four
modes), the CPU read around each run, and the per-round difference with a
baseline."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from harness.paired import paired_rounds
from harness.workload import Run


def test_each_round_runs_every_mode_twice_mirrored_and_the_next_is_rotated() -> None:
    order: list[str] = []

    def measure(mode: str) -> Run:
        order.append(mode)
        return Run([0.1], 10, 1.0)

    paired = paired_rounds(["a", "b", "c"], 3, measure, "test")
    assert "".join(order) == "abccba" + "bcaacb" + "cabbac"
    assert [len(one["a"]) for one in paired.rounds] == [2, 2, 2]


def test_cpu_is_counted_around_each_runs_own_mode() -> None:
    used = {"off": 0.0, "on": 0.0}

    def measure(mode: str) -> Run:
        used[mode] += 0.5 if mode == "on" else 0.25
        return Run([0.1], 10, 1.0)

    paired = paired_rounds(["off", "on"], 2, measure, "test", lambda mode: used[mode])
    assert paired.cpu_s == {"off": 1.0, "on": 2.0}


def test_the_paired_difference_is_the_median_over_rounds() -> None:
    # "on" is 10, 20, then 60 ms slower than "off", round by round.
    slower = [0.010, 0.020, 0.060]
    ons = 0

    def measure(mode: str) -> Run:
        nonlocal ons
        if mode == "off":
            return Run([0.100, 0.200, 0.300], 30, 2.0)
        extra = slower[ons // 2]  # two runs a round
        ons += 1
        return Run([0.100 + extra, 0.200 + extra, 0.300 + extra], 30, 3.0)

    paired = paired_rounds(["off", "on"], 3, measure, "test")
    assert round(paired.added_ttft_ms("on", "off"), 6) == 20.0
    assert len(paired.ttfts("on")) == 18
    assert paired.medians("off") == {"ttft_p50_ms": 200.0, "tokens_per_s": 15.0}


def test_from_four_modes_each_runs_after_every_other_equally_often() -> None:
    order: list[str] = []

    def measure(mode: str) -> Run:
        order.append(mode)
        return Run([0.1], 10, 1.0)

    paired_rounds(["a", "b", "c", "d"], 4, measure, "test")
    assert "".join(order[:8]) == "abdccdba"
    rounds = ["".join(order[i : i + 8]) for i in range(0, 32, 8)]
    after = Counter(pair for one in rounds for pair in pairwise(one))
    assert {after[(x, y)] for x in "abcd" for y in "abcd" if x != y} == {2}
