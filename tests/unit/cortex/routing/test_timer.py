from __future__ import annotations

import asyncio
from collections.abc import Callable

from cortex.routing.timer import Timer


def _recorder(calls: list[str], name: str, done: asyncio.Event) -> Callable[[], None]:
    def record() -> None:
        calls.append(name)
        done.set()

    return record


async def test_a_timer_that_fired_is_disarmed_and_can_be_armed_again() -> None:
    timer = Timer(asyncio.get_running_loop())
    fired = asyncio.Event()
    assert not timer.armed
    timer.arm(0, fired.set)
    assert timer.armed
    await asyncio.wait_for(fired.wait(), 10)
    assert not timer.armed
    fired.clear()
    timer.arm(0, fired.set)
    await asyncio.wait_for(fired.wait(), 10)


async def test_arming_replaces_what_was_armed_and_cancel_disarms() -> None:
    loop = asyncio.get_running_loop()
    timer = Timer(loop)
    calls: list[str] = []
    fired = asyncio.Event()
    timer.arm(3600, _recorder(calls, "first", fired))
    timer.arm_at(loop.time(), _recorder(calls, "second", fired))
    await asyncio.wait_for(fired.wait(), 10)
    assert calls == ["second"]
    fired.clear()
    timer.arm(0, _recorder(calls, "third", fired))
    timer.cancel()
    assert not timer.armed
    timer.cancel()  # cancelling a disarmed timer does nothing
    # A later timer fires after the cancelled one would have.
    Timer(loop).arm(0, _recorder(calls, "marker", fired))
    await asyncio.wait_for(fired.wait(), 10)
    assert calls == ["second", "marker"]
