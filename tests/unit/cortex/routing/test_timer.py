from __future__ import annotations

import asyncio
from collections.abc import Callable

from cortex.routing.timer import Timer, set_within


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


async def test_set_within_answers_true_when_the_event_comes_first() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_soon(event.set)
    never = asyncio.Event()
    assert await set_within(event, never.wait())


async def test_set_within_answers_false_when_the_sleep_ends_first() -> None:
    assert not await set_within(asyncio.Event(), asyncio.sleep(0))


async def test_set_within_cancels_the_sleep_it_did_not_need() -> None:
    event = asyncio.Event()
    event.set()
    cancelled = asyncio.Event()

    async def sleep() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    assert await set_within(event, sleep())
    await asyncio.wait_for(cancelled.wait(), 10)
