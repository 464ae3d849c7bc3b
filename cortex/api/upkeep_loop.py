"""The loop of the stores' upkeep (the Responses store's leases and retention,
the batch runner's): a few steps every tick, the slow ones (purges) at a
longer interval, each step's failure reported and the loop going on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

# A step: its name (in the failure's log line and metrics) and its work.
Step = tuple[str, Callable[[], Awaitable[object]]]


async def upkeep_loop(
    tick_s: float,
    steps: Sequence[Step],
    slow_s: float,
    slow_steps: Sequence[Step],
    failed: Callable[[str], None],
) -> None:
    """Run `steps` every `tick_s` and `slow_steps` every `slow_s` (both at
    once first) until cancelled. A step that raises is reported by
    `failed(name)`, called in its `except` (so it may log the traceback),
    and the others still run: the next tick retries what failed."""
    next_slow = 0.0
    while True:
        await run_steps(steps, failed)
        if time.monotonic() >= next_slow:
            await run_steps(slow_steps, failed)
            next_slow = time.monotonic() + slow_s
        await asyncio.sleep(tick_s)


async def run_steps(steps: Sequence[Step], failed: Callable[[str], None]) -> None:
    """Each step once, in order; one that raises is reported by `failed`."""
    for name, step in steps:
        try:
            await step()
        except Exception:
            failed(name)
