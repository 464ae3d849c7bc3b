"""A one-shot timer that knows whether it is armed. The attempt watchdog
(deadlines.py) and the HTTP guard's head, body and send deadlines
(cortex/http/guard.py) each keep one and re-arm it as they go; a timer that
fires or is cancelled is disarmed, so that arming it again is a new one.

Also `set_within`: waiting for an event or a sleep, whichever ends first (a
request waiting for its model to wake, a batch for its cancel or expiry)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Timer:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self, seconds: float, callback: Callable[[], None]) -> None:
        """Run `callback` in `seconds`, in place of what was armed."""
        self.arm_at(self._loop.time() + seconds, callback)

    def arm_at(self, when: float, callback: Callable[[], None]) -> None:
        """Run `callback` at the loop's time `when`, in place of what was armed."""
        self.cancel()
        self._handle = self._loop.call_at(when, self._fire, callback)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self, callback: Callable[[], None]) -> None:
        self._handle = None
        callback()


async def set_within(event: asyncio.Event, sleep: Awaitable[object]) -> bool:
    """Wait until `event` is set or `sleep` ends, whichever comes first (the
    other is cancelled); whether the event was set."""
    waiting = asyncio.ensure_future(event.wait())
    slept = asyncio.ensure_future(sleep)
    try:
        await asyncio.wait({waiting, slept}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        slept.cancel()
    return event.is_set()
