"""Background work repeated at an interval, which outlives its failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable


async def every(
    interval_s: float, work: Callable[[], Awaitable[None]], log: logging.Logger, failed: str
) -> None:
    """Await `work()` every `interval_s` until cancelled. A failure is
    logged on the caller's `log` (the message `failed`, with the traceback)
    and the next round runs: the work retries what failed."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await work()
        except Exception:
            log.exception(failed)
