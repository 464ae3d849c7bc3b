"""Time for the admission tests, moved by hand: a clock and a sleep that
ends only when the test advances past it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class FakeTime:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + delay, wake))
        await wake

    @property
    def sleeping(self) -> int:
        return sum(1 for _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for until, wake in self._sleepers:
            if until <= self.now and not wake.done():
                wake.set_result(None)


async def until(condition: Callable[[], bool], turns: int = 1000) -> None:
    """Let the event loop run until `condition` holds (a bounded number of
    turns, no wall-clock sleep); fail if it never does."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")
