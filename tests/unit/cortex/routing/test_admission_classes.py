"""Admission with the batch rules (ManualClock, slots counted by the test
as the pool would): batch leaves the reserve to an interactive request,
which passes the batch waiters at once; batch trickles while a higher
class runs and fills the slots when it ends; the trickle without caps;
none of it in FIFO order."""

from __future__ import annotations

import asyncio

from axon.priority import PriorityClass
from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionControl, AdmissionOptions, Claim, Ticket
from cortex.routing.request_cost import Spent
from harness.clock import ManualClock, until


class Model:
    """One model of `cap` slots (None: no cap) and the requests on it."""

    def __init__(self, cap: int | None, fair: bool = True, reserved: int = 1) -> None:
        self.cap = cap
        self.tickets: list[Ticket] = []
        time = ManualClock()
        options = AdmissionOptions(
            queue_size=16,
            queue_timeout_s=100.0,
            fair_queuing=fair,
            batch_reserved_slots=reserved,
            batch_trickle_slots=1,
        )
        self.control = AdmissionControl(options, self._free, time, time.sleep)

    def _free(self, model: str) -> int | None:
        return None if self.cap is None else self.cap - len(self.tickets)

    async def send(self, cls: PriorityClass, tenant: str = "t") -> asyncio.Task[Ticket]:
        """A request of `cls`, dispatched when admitted; returns once it
        runs or waits."""

        async def request() -> Ticket:
            ticket = await self.control.admit("m", "adm-classes", Claim(tenant, cls=cls))
            self.tickets.append(ticket)
            return ticket

        running, depth = len(self.tickets), self.control.depth("m")
        task = asyncio.create_task(request())
        await until(lambda: len(self.tickets) > running or self.control.depth("m") > depth)
        return task

    def running(self, cls: PriorityClass) -> int:
        return sum(1 for t in self.tickets if t.claim.cls == cls)

    def end(self, cls: PriorityClass) -> None:
        """One running request of `cls` ends (the pool settles it, frees
        its slot, then wakes the queue)."""
        ticket = next(t for t in self.tickets if t.claim.cls == cls)
        self.control.settle(ticket, Spent(pb.GenerateRequest(model="m")), freeing=True)
        self.tickets.remove(ticket)
        self.control.wake("m")

    async def close(self, tasks: list[asyncio.Task[Ticket]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_batch_leaves_the_reserve_and_interactive_passes_its_waiters() -> None:
    model = Model(cap=4)
    batch = [await model.send("batch") for _ in range(5)]
    assert model.running("batch") == 3 and model.control.depth("m") == 2
    interactive = await model.send("interactive")
    assert interactive.done() and model.running("interactive") == 1
    await model.close(batch)


async def test_batch_trickles_while_a_higher_class_runs_and_fills_after() -> None:
    model = Model(cap=8)
    default = await model.send("default")
    batch = [await model.send("batch") for _ in range(4)]
    assert model.running("batch") == 1 and model.control.depth("m") == 3
    model.end("batch")
    await until(lambda: model.running("batch") == 1)  # the next one, still one at a time
    assert model.control.depth("m") == 2
    model.end("default")
    await until(lambda: model.running("batch") == 3)  # every waiter
    assert default.done() and model.control.depth("m") == 0
    await model.close(batch)


async def test_a_slot_held_for_interactive_work_keeps_batch_to_its_trickle() -> None:
    # Between two requests of a one-at-a-time interactive client its slot
    # is held (slot_holds.py): the class is still at work, so batch does
    # not fill the slots in that moment and run beside its next request.
    model = Model(cap=8)
    await model.send("interactive", "vip")
    batch = [await model.send("batch", "bulk") for _ in range(4)]
    assert model.running("batch") == 1
    model.end("interactive")
    for _ in range(10):
        await asyncio.sleep(0)
    assert model.running("batch") == 1 and model.control.depth("m") == 3
    again = await model.send("interactive", "vip")
    assert again.done() and model.running("batch") == 1
    await model.close(batch)


async def test_the_trickle_holds_without_caps() -> None:
    model = Model(cap=None)
    await model.send("default")
    batch = [await model.send("batch") for _ in range(3)]
    assert model.running("batch") == 1 and model.control.depth("m") == 2
    model.end("default")
    await until(lambda: model.running("batch") == 3)
    await model.close(batch)


async def test_a_cap_at_the_reserve_still_runs_one_batch_request() -> None:
    model = Model(cap=1)
    batch = [await model.send("batch") for _ in range(2)]
    assert model.running("batch") == 1
    model.end("batch")
    await until(lambda: model.running("batch") == 1 and model.control.depth("m") == 0)
    await model.close(batch)


async def test_no_batch_rules_in_fifo_order() -> None:
    model = Model(cap=4, fair=False)
    await model.send("default")
    batch = [await model.send("batch") for _ in range(3)]
    assert model.running("batch") == 3 and model.control.depth("m") == 0
    await model.close(batch)
