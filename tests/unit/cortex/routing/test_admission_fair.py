"""Admission with tenants and classes (ManualClock, free slots given by the
test): the fair order through admit and wake, a tenant past its share
refused and nobody else, a lower class refused to make room for a higher
one, the class capped by the tenant's ceiling, the charge settled with
real usage, and FIFO when fair queuing is off."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from axon.errors import ModelOverloadedError
from axon.priority import PriorityClass
from axon.protomaps import CLASS_TO_PB
from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionControl, AdmissionOptions, Claim, set_class
from cortex.routing.admission_options import StaticTenant
from cortex.routing.request_cost import Spent
from cortex.routing.tenant_policy import FixedTenantPolicies, TenantPolicy
from harness.clock import ManualClock, until
from tests.unit.cortex.routing.slots import Slots, rejections


def _control(
    slots: Slots, *, size: int = 8, fair: bool = True, share: float = 0.5
) -> AdmissionControl:
    time = ManualClock()
    options = AdmissionOptions(
        queue_size=size, queue_timeout_s=100.0, fair_queuing=fair, tenant_queue_share=share
    )
    return AdmissionControl(options, slots, time, time.sleep)


class Admitted:
    """Requests queued by the test, and the order admission let them go."""

    def __init__(self, control: AdmissionControl, slots: Slots, label: str) -> None:
        self.control, self.slots, self.label = control, slots, label
        self.order: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def queue(self, name: str, claim: Claim) -> asyncio.Task[None]:
        async def request() -> None:
            await self.control.admit("m", self.label, claim)
            self.order.append(name)
            self.slots.free = (self.slots.free or 0) - 1

        depth, ended = self.control.depth("m"), self._ended()
        task = asyncio.create_task(request())
        self.tasks.append(task)
        # Queued, or some request refused (one that made room for it, or itself).
        await until(lambda: self.control.depth("m") == depth + 1 or self._ended() > ended)
        return task

    def _ended(self) -> int:
        return sum(1 for t in self.tasks if t.done())

    async def release(self, count: int) -> None:
        for _ in range(count):
            done = len(self.order)
            self.slots.free = 1
            self.control.wake("m")
            await until(lambda: len(self.order) == done + 1)  # noqa: B023

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_a_newly_arrived_tenant_takes_the_next_slot_before_the_backlog() -> None:
    slots = Slots(0)
    admitted = Admitted(_control(slots, size=16), slots, "fair-light")
    for i in range(6):
        await admitted.queue(f"noisy{i}", Claim("noisy", cost=100))
    await admitted.release(2)
    await admitted.queue("quiet", Claim("quiet", cost=100))
    await admitted.release(2)
    # Level with noisy in virtual time, nothing of it running: the next
    # slot to free is quiet's (the wait of issue 26's target: one slot).
    assert admitted.order == ["noisy0", "noisy1", "quiet", "noisy2"]
    await admitted.close()


async def test_weights_share_the_slots() -> None:
    slots = Slots(0)
    admitted = Admitted(_control(slots, size=16, share=1.0), slots, "fair-weights")
    for i in range(8):
        await admitted.queue(f"a{i}", Claim("a", cost=100, weight=1))
        await admitted.queue(f"b{i}", Claim("b", cost=100, weight=3))
    await admitted.release(8)
    assert sum(1 for n in admitted.order if n.startswith("b")) == 6
    await admitted.close()


async def test_a_tenant_past_its_share_is_refused_and_nobody_else() -> None:
    slots = Slots(0)
    admitted = Admitted(_control(slots, size=8, share=0.5), slots, "fair-share")
    for i in range(4):  # weight 1: half the queue
        await admitted.queue(f"noisy{i}", Claim("noisy"))
    before = rejections("fair-share", "tenant_share")
    with pytest.raises(ModelOverloadedError, match="this tenant already has 4"):
        await admitted.control.admit("m", "fair-share", Claim("noisy"))
    assert rejections("fair-share", "tenant_share") == before + 1
    for i in range(4):
        await admitted.queue(f"other{i}", Claim(f"other{i % 2}"))
    assert admitted.control.depth("m") == 8 and not any(t.done() for t in admitted.tasks)
    await admitted.close()


async def test_the_anonymous_tenant_may_fill_the_whole_queue() -> None:
    slots = Slots(0)
    admitted = Admitted(_control(slots, size=4, share=0.25), slots, "fair-anon")
    for i in range(4):
        await admitted.queue(f"anon{i}", Claim(""))
    with pytest.raises(ModelOverloadedError, match="4 requests are already waiting"):
        await admitted.control.admit("m", "fair-anon", Claim(""))
    await admitted.close()


async def test_interactive_overtakes_batch_and_a_full_queue_refuses_batch_for_it() -> None:
    slots = Slots(0)
    admitted = Admitted(_control(slots, size=3, share=1.0), slots, "fair-class")
    batch = [await admitted.queue(f"batch{i}", Claim("b", cls="batch")) for i in range(3)]
    before = rejections("fair-class", "preempted")
    await admitted.queue("interactive", Claim("i", cls="interactive"))
    with pytest.raises(ModelOverloadedError, match="higher priority class than 'batch'"):
        await batch[2]  # the newest batch request made room
    assert rejections("fair-class", "preempted") == before + 1
    await admitted.release(2)
    assert admitted.order == ["interactive", "batch0"]
    # Nothing lower than batch: a batch request finds the queue full.
    for i in range(2):  # batch1 and these two: full
        await admitted.queue(f"default{i}", Claim("d"))
    with pytest.raises(ModelOverloadedError, match="already waiting"):
        await admitted.control.admit("m", "fair-class", Claim("b", cls="batch"))
    await admitted.close()


async def test_fifo_order_when_fair_queuing_is_off() -> None:
    slots = Slots(0)
    admitted = Admitted(_control(slots, size=8, fair=False), slots, "fair-off")
    for name, claim in [("b", Claim("x", cls="batch")), ("i", Claim("y", cls="interactive"))]:
        await admitted.queue(name, claim)
    for i in range(3):  # no per-tenant share either
        await admitted.queue(f"x{i}", Claim("x"))
    await admitted.release(5)
    assert admitted.order == ["b", "i", "x0", "x1", "x2"]
    await admitted.close()


@pytest.mark.parametrize(
    ("asked", "ceiling", "given"),
    [
        ("interactive", "default", "default"),
        ("interactive", "interactive", "interactive"),
        ("batch", "interactive", "batch"),
        (None, "batch", "batch"),
    ],
)
def test_the_class_is_capped_by_the_tenants_ceiling(
    asked: PriorityClass | None, ceiling: PriorityClass, given: PriorityClass
) -> None:
    policies = FixedTenantPolicies({"t": TenantPolicy(weight=2.0, max_priority=ceiling)})
    options = AdmissionOptions()
    control = AdmissionControl(options, Slots(None), ManualClock(), tenants=policies)
    request = pb.GenerateRequest(model="m")
    if asked is not None:
        request.priority = CLASS_TO_PB[asked]
    claim = control.claim(request, "t")
    assert (claim.cls, claim.weight) == (given, 2.0)
    set_class(request, claim.cls)
    assert request.priority in (CLASS_TO_PB[given], pb.PRIORITY_CLASS_UNSPECIFIED)


def test_static_tenants_from_the_settings() -> None:
    options = AdmissionOptions(tenants={"gold": StaticTenant(weight=3, max_priority="interactive")})
    control = AdmissionControl(options, Slots(None), ManualClock())
    request = pb.GenerateRequest(model="m", priority=pb.PRIORITY_CLASS_INTERACTIVE)
    assert control.claim(request, "gold").cls == "interactive"
    assert control.claim(request, "lead").cls == "default"
    assert options.tenant_bound("gold", 3) == options.queue_size
    assert options.tenant_bound("lead", 1) == options.queue_size // 2


async def test_the_charge_is_settled_with_what_the_request_used() -> None:
    slots = Slots(1)
    control = _control(slots)
    request = pb.GenerateRequest(model="m", sampling=pb.SamplingParams(max_tokens=1000))
    first = control.claim(request, "t")
    ticket = await control.admit("m", "fair-settle", first)
    spent = Spent(request)
    spent.see(pb.GenerateResponse(choices=[pb.ChoiceDelta(text="x")]))
    spent.see(pb.GenerateResponse(usage=pb.Usage(prompt_tokens=7, completion_tokens=10)))
    assert spent.reported and spent.total == 17
    control.settle(ticket, spent)
    # The model's mean output learned from it: the next estimate is smaller.
    assert control.claim(request, "t").cost < first.cost


def _holds(label: str, outcome: str) -> float:
    labels = {"model": label, "outcome": outcome}
    return REGISTRY.get_sample_value("neuraxis_admission_slot_holds_total", labels) or 0.0


async def _quiet_request_ends(
    label: str, hold_ms: float = 20.0, cls: PriorityClass = "default"
) -> tuple[AdmissionControl, Admitted, ManualClock]:
    """A model of three slots: quiet's request takes one, noisy's the two
    others while it runs, and noisy's next requests wait; quiet's request
    ends (having used less than noisy's two: it is owed the next slot)."""
    slots, time = Slots(3), ManualClock()
    options = AdmissionOptions(queue_size=16, queue_timeout_s=100.0, slot_hold_ms=hold_ms)
    control = AdmissionControl(options, slots, time, time.sleep)
    request = pb.GenerateRequest(model="m", priority=CLASS_TO_PB[cls])
    ticket = await control.admit("m", label, Claim("quiet", cls=cls, cost=100))
    for _ in range(2):
        await control.admit("m", label, Claim("noisy", cost=100))
    slots.free = 0
    admitted = Admitted(control, slots, label)
    for i in range(3):
        await admitted.queue(f"noisy{i}", Claim("noisy", cost=100))
    slots.free = 1
    await until(lambda: time.sleeping == 3)  # the waiters' queue timeouts
    control.settle(ticket, Spent(request))
    if hold_ms and cls != "batch":
        await until(lambda: time.sleeping == 4)  # and the hold's timer
    return control, admitted, time


async def test_the_slot_a_tenant_frees_is_held_for_its_next_request() -> None:
    control, admitted, _ = await _quiet_request_ends("hold-taken")
    for _ in range(10):
        await asyncio.sleep(0)
    assert admitted.order == []  # held: noisy's waiter did not take it
    await control.admit("m", "hold-taken", Claim("quiet", cost=100))  # at once
    assert _holds("hold-taken", "taken") == 1
    await admitted.close()


async def test_a_hold_lapses_and_the_slot_goes_to_the_next_waiter() -> None:
    _, admitted, time = await _quiet_request_ends("hold-lapse")
    time.advance(0.019)
    for _ in range(10):
        await asyncio.sleep(0)
    assert admitted.order == []
    time.advance(0.002)
    await until(lambda: admitted.order == ["noisy0"])
    assert _holds("hold-lapse", "expired") == 1
    await admitted.close()


@pytest.mark.parametrize(
    ("hold_ms", "cls"), [(0.0, "default"), (20.0, "batch")], ids=["off", "batch"]
)
async def test_no_hold_when_off_or_for_batch_work(hold_ms: float, cls: PriorityClass) -> None:
    label = f"hold-none-{cls}"
    _, admitted, _ = await _quiet_request_ends(label, hold_ms, cls)
    await until(lambda: admitted.order == ["noisy0"])
    await admitted.close()


async def test_a_lower_class_request_ends_the_hold_and_queues() -> None:
    control, admitted, _ = await _quiet_request_ends("hold-lower")
    lower = asyncio.create_task(control.admit("m", "hold-lower", Claim("quiet", cls="batch")))
    await until(lambda: admitted.order == ["noisy0"])  # the slot went to the fair order
    assert _holds("hold-lower", "lower_class") == 1 and not lower.done()
    lower.cancel()
    await admitted.close()
