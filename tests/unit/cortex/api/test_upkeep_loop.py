"""The upkeep loop: its steps every tick, the slow ones at their interval,
a failing step reported without stopping the others or the loop."""

from __future__ import annotations

import asyncio
import contextlib

from cortex.api.upkeep_loop import run_steps, upkeep_loop


async def test_steps_run_each_tick_and_slow_steps_at_their_interval() -> None:
    runs: list[str] = []
    failures: list[str] = []
    ticked = asyncio.Event()

    async def fast() -> None:
        runs.append("fast")
        if runs.count("fast") == 3:
            ticked.set()

    async def broken() -> None:
        raise RuntimeError("store away")

    async def slow() -> None:
        runs.append("slow")

    steps = [("broken", broken), ("fast", fast)]
    # An hour between slow rounds: only the first one falls in the test.
    loop = asyncio.create_task(upkeep_loop(0, steps, 3600, [("slow", slow)], failures.append))
    await ticked.wait()
    loop.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await loop
    assert runs[:4] == ["fast", "slow", "fast", "fast"]
    assert failures[:3] == ["broken", "broken", "broken"]


async def test_run_steps_runs_each_once_and_reports_the_failing_one() -> None:
    runs: list[str] = []
    failures: list[str] = []

    async def broken() -> None:
        raise ValueError("no")

    async def works() -> None:
        runs.append("works")

    await run_steps([("broken", broken), ("works", works)], failures.append)
    assert (runs, failures) == (["works"], ["broken"])
