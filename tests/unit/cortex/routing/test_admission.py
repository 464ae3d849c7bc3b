"""Admission control on its own: free slots given by the test, time moved
by hand (ManualClock): at once while a slot is free, FIFO waiting beyond it,
queue full and timeout refused with 503 model_overloaded, a cancelled
waiter gone at once, no slot handed out twice, the metrics."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from axon.errors import ModelOverloadedError, UnavailableError, mapping_for
from cortex.routing.admission import AdmissionControl, AdmissionOptions
from cortex.routing.admission_wait import AdmissionWait
from harness.clock import ManualClock, until
from tests.unit.cortex.routing.slots import Slots, rejections


def _control(
    slots: Slots, time: ManualClock, *, size: int = 4, timeout_s: float = 10.0, cap: int = 0
) -> AdmissionControl:
    options = AdmissionOptions(
        replica_max_concurrency=cap, queue_size=size, queue_timeout_s=timeout_s
    )
    return AdmissionControl(options, slots, time, time.sleep)


def _waits(model: str) -> tuple[float, float]:
    count = REGISTRY.get_sample_value(
        "neuraxis_admission_queue_wait_seconds_count", {"model": model}
    )
    total = REGISTRY.get_sample_value("neuraxis_admission_queue_wait_seconds_sum", {"model": model})
    return count or 0.0, total or 0.0


def _depth(model: str) -> float | None:
    return REGISTRY.get_sample_value("neuraxis_admission_queue_depth", {"model": model})


async def test_a_free_slot_admits_at_once_and_none_free_queues() -> None:
    slots, time = Slots(1), ManualClock()
    control = _control(slots, time)
    await control.admit("m", "adm-free")  # returns without waiting
    slots.free = 0
    waiting = asyncio.create_task(control.admit("m", "adm-free"))
    await until(lambda: control.depth("m") == 1)
    assert not waiting.done()
    assert _depth("adm-free") == 1
    slots.free = 1
    control.wake("m")
    await waiting
    assert control.depth("m") == 0 and _depth("adm-free") == 0


async def test_waiters_are_admitted_in_arrival_order() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time)
    admitted: list[int] = []

    async def request(i: int) -> None:
        await control.admit("m", "adm-fifo")
        admitted.append(i)
        slots.free = (slots.free or 0) - 1  # the pool dispatches it: the slot is taken

    tasks = []
    for i in range(3):
        tasks.append(asyncio.create_task(request(i)))
        await until(lambda: control.depth("m") == len(tasks))
    for count in (1, 2, 3):
        slots.free = 1
        control.wake("m")
        await until(lambda: len(admitted) == count)  # noqa: B023 (awaited here)
        assert admitted == list(range(count))
    await asyncio.gather(*tasks)


async def test_a_newcomer_queues_behind_waiters_even_when_a_slot_is_free() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time)
    first = asyncio.create_task(control.admit("m", "adm-order"))
    await until(lambda: control.depth("m") == 1)
    slots.free = 1  # freed, but nobody has been woken yet
    second = asyncio.create_task(control.admit("m", "adm-order"))
    await until(lambda: control.depth("m") == 2)
    control.wake("m")
    await first
    assert not second.done() and control.depth("m") == 1
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_one_free_slot_is_handed_to_one_waiter_however_often_woken() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time)
    tasks = [asyncio.create_task(control.admit("m", "adm-twice")) for _ in range(2)]
    await until(lambda: control.depth("m") == 2)
    slots.free = 1
    control.wake("m")
    control.wake("m")  # before the first waiter has resumed and dispatched
    await until(lambda: any(t.done() for t in tasks))
    assert [t.done() for t in tasks] == [True, False]
    assert control.depth("m") == 1
    tasks[1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_full_queue_refuses_at_once_with_503_model_overloaded() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time, size=2)
    tasks = [asyncio.create_task(control.admit("m", "adm-full")) for _ in range(2)]
    await until(lambda: control.depth("m") == 2)
    before = rejections("adm-full", "queue_full")
    with pytest.raises(ModelOverloadedError) as refused:
        await control.admit("m", "adm-full")
    error = refused.value
    assert isinstance(error, UnavailableError) and error.retry_after == 1
    mapping = mapping_for(error)
    assert (mapping.http_status, mapping.openai_code) == (503, "model_overloaded")
    assert "overloaded" in error.message
    assert rejections("adm-full", "queue_full") == before + 1
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_queue_of_size_zero_refuses_as_soon_as_the_replicas_are_full() -> None:
    control = _control(Slots(0), ManualClock(), size=0)
    with pytest.raises(ModelOverloadedError):
        await control.admit("m", "adm-zero")


async def test_a_waiter_past_the_queue_timeout_is_refused_and_leaves() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time, timeout_s=10.0)
    before = rejections("adm-timeout", "timeout")
    count, total = _waits("adm-timeout")
    waiting = asyncio.create_task(control.admit("m", "adm-timeout"))
    await until(lambda: time.sleeping == 1)
    time.advance(9.0)
    await until(lambda: time.sleeping == 1)  # still waiting
    assert not waiting.done()
    time.advance(1.0)
    with pytest.raises(ModelOverloadedError, match="within 10 s"):
        await waiting
    assert control.depth("m") == 0
    assert rejections("adm-timeout", "timeout") == before + 1
    assert _waits("adm-timeout") == (count + 1, total + 10.0)
    slots.free = 1
    control.wake("m")  # nothing left to wake: the refused waiter is gone


async def test_the_request_is_told_how_long_it_waited_however_the_wait_ends() -> None:
    slots, time = Slots(1), ManualClock()
    control = _control(slots, time, timeout_s=10.0)
    at_once = AdmissionWait()
    await control.admit("m", "adm-waited", wait=at_once)
    slots.free = 0
    granted, timed_out = AdmissionWait(), AdmissionWait()
    first = asyncio.create_task(control.admit("m", "adm-waited", wait=granted))
    await until(lambda: time.sleeping == 1)
    time.advance(2.5)
    second = asyncio.create_task(control.admit("m", "adm-waited", wait=timed_out))
    await until(lambda: time.sleeping == 2)
    slots.free = 1
    control.wake("m")
    await first
    slots.free = 0  # the pool dispatched it
    time.advance(10.0)
    with pytest.raises(ModelOverloadedError):
        await second
    assert (at_once.seconds, granted.seconds, timed_out.seconds) == (0.0, 2.5, 10.0)


def test_a_requests_parts_wait_side_by_side_so_its_wait_is_the_longest() -> None:
    wait = AdmissionWait()
    for seconds in (0.5, 2.0, 1.0):
        wait.waited(seconds)
    assert wait.seconds == 2.0


async def test_a_cancelled_waiter_leaves_the_queue_at_once() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time)
    leaving = asyncio.create_task(control.admit("m", "adm-cancel"))
    staying = asyncio.create_task(control.admit("m", "adm-cancel"))
    await until(lambda: control.depth("m") == 2)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert control.depth("m") == 1 and time.sleeping == 1
    slots.free = 1
    control.wake("m")
    await staying  # the freed slot went to the one still waiting


async def test_a_slot_granted_to_a_waiter_cancelled_before_it_resumed_goes_on() -> None:
    slots, time = Slots(0), ManualClock()
    control = _control(slots, time)
    first = asyncio.create_task(control.admit("m", "adm-regrant"))
    await until(lambda: control.depth("m") == 1)
    second = asyncio.create_task(control.admit("m", "adm-regrant"))
    await until(lambda: control.depth("m") == 2)
    slots.free = 1
    control.wake("m")  # granted to `first`, which has not resumed yet
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await second  # the grant passed on


async def test_no_cap_or_admission_off_never_waits() -> None:
    time = ManualClock()
    await _control(Slots(None), time, size=0).admit("m", "adm-none")
    await _control(Slots(0), time, size=0, cap=-1).admit("m", "adm-off")


def test_a_replicas_cap_is_the_setting_else_what_its_neuron_reports() -> None:
    assert AdmissionOptions(replica_max_concurrency=4).cap(reported=256) == 4
    assert AdmissionOptions(replica_max_concurrency=0).cap(reported=256) == 256
    assert AdmissionOptions(replica_max_concurrency=0).cap(reported=0) is None
    assert AdmissionOptions(replica_max_concurrency=-1).cap(reported=256) is None
    assert not AdmissionOptions(replica_max_concurrency=-1).enabled
