"""One manual clock for the tests: time moves only when a test says so.

It reads as a monotonic clock (call it, or `monotonic()`), as wall time
(`time()`: a fixed epoch plus the same seconds) and sleeps (`sleep`, woken
by `advance`), so code that takes its clock and sleep as arguments (the
pool, admission, ejection, the limiter, the controller) runs in tests
without waiting. `settle` and `until` let the event loop run without time
passing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# A wall-clock reading of the 2020s, so that times formatted or stored as
# timestamps look like real ones.
EPOCH = 1_800_000_000.0


class ManualClock:
    def __init__(self, now: float = 1000.0, epoch: float = EPOCH) -> None:
        self.now = now
        self.epoch = epoch
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch + self.now

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, woken))
        await woken

    @property
    def sleeping(self) -> int:
        """How many sleepers wait for their time."""
        return sum(1 for _, woken in self._sleepers if not woken.done())

    def advance(self, seconds: float) -> None:
        """Move time on; the sleepers whose time came are woken (they run at
        the event loop's next turns)."""
        self.now += seconds
        for wake_at, woken in list(self._sleepers):
            # A sleeper due now wakes despite float rounding of the sums.
            if wake_at <= self.now + 1e-9:
                self._sleepers.remove((wake_at, woken))
                if not woken.done():
                    woken.set_result(None)

    async def elapse(self, seconds: float) -> None:
        """`advance`, then let every task that can run do so."""
        self.advance(seconds)
        await settle()


async def settle() -> None:
    """Let every task that can run without time passing run to its next wait."""
    for _ in range(50):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], turns: int = 1000) -> None:
    """Let the event loop run until `condition` holds (a bounded number of
    turns, no wall-clock sleep); fail if it never does."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")
