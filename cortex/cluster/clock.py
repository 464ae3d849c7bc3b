"""The controller's clock: monotonic time for its deadlines (back-off, node
suspicion, rebalance spacing), wall time for what it reports (when a replica
failed or became ready), and sleeping. Passed in so that tests move time by
hand instead of waiting for it."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
