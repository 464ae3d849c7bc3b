"""The shared timing of a batch of requests (harness/workload.timed): every
index once, never more than the concurrency at once, the figures summed."""

from __future__ import annotations

import asyncio

from harness.workload import timed


async def test_timed_runs_each_index_within_the_concurrency() -> None:
    seen: list[int] = []
    in_flight = {"now": 0, "most": 0}

    async def one(i: int) -> tuple[float, int]:
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        await asyncio.sleep(0.01)
        in_flight["now"] -= 1
        seen.append(i)
        return i / 10, i

    run = await timed(7, 3, one)
    assert sorted(seen) == list(range(7))
    assert in_flight["most"] == 3
    assert run.ttfts == [i / 10 for i in range(7)]  # in index order
    assert run.tokens == sum(range(7))
    assert run.wall_s >= 0.03  # three waves of 0.01 s at the least
