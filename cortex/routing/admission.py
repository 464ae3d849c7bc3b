"""Admission control: how many requests a model's replicas take at once,
the bounded queue the rest wait in, and in what order they leave it.

Each replica has a concurrency cap (`replica_max_concurrency`, by default
the batch size its engine reports in Info: vLLM's max_num_seqs). While a
model's ready replicas have a free slot between them, its requests go
straight to the pool; beyond that they wait in the model's queue, and each
freed slot (a request ending, a replica becoming ready) goes to the waiter
the queue's order picks (`fair_queue.py`): by default the highest priority
class waiting, then across tenants by weighted fair queuing over tokens,
first come first served within a tenant; with `fair_queuing = false`
plain arrival order. A request that finds the queue full, or waits past
`queue_timeout_s`, fails at once with `ModelOverloadedError` (503 +
Retry-After, code `model_overloaded`) instead of piling up in the engines'
own queues until a deadline answers 504. A waiter that is cancelled (its
client left) leaves the queue at once.

With fair queuing the batch class gets what the classes above it leave
(`class_slots.py`): it may not take a model's last `batch_reserved_slots`
per replica, and while requests of a higher class run or wait on the model
it runs at most `batch_trickle_slots` per replica; a batch request held
back by either waits in the queue like one that found no slot.

With fair queuing the queue is bounded per tenant too (`tenant_queue_share`
times its weight): a tenant past its bound is refused, never another
tenant's waiter. When the queue is full in total, a request of a higher
class takes the place of the newest waiter of the lowest class waiting,
which is refused (503); a request already dispatched is never touched.

A request's tenant, weight and class ceiling come from the tenants'
policies (`TenantPolicies`, passed in); its class is the one it asked for,
capped by its tenant's `max_priority`, and it is charged its estimated
tokens when it gets a slot, corrected by `settle` when it ends
(`request_cost.py`).

Newcomers never overtake waiters that would go before them: a request that
finds one of its class or a higher one queued queues behind them (its
place among them is the queue's order); one that finds only lower-class
waiters (held back by the batch rules) goes ahead of them to a free slot.
A slot handed to a waiter is counted as taken (`_granted`) until the
waiter resumes and the pool dispatches it, so that two wake-ups cannot
hand out one slot twice.

What is free is the pool's to say (`FreeSlots`: it knows the replicas, their
caps and their outstanding requests); when no cap applies (admission off, a
replica without one, or no ready replica, which the pool answers itself)
it says None and nothing waits here. Time comes from a clock and a sleep
passed in, so the tests drive the queue by hand. The per-replica choice
among the replicas with a free slot stays the routing policy's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from axon.errors import ModelOverloadedError
from axon.priority import DEFAULT_CLASS, PriorityClass, capped, rank
from axon.protomaps import CLASS_TO_PB, PB_TO_CLASS
from axon.v1 import neuron_pb2 as pb
from cortex import metrics
from cortex.routing.admission_options import AdmissionOptions
from cortex.routing.admission_wait import AdmissionWait
from cortex.routing.class_slots import BATCH, ModelSlots, may_take
from cortex.routing.fair_queue import FairQueue, FifoQueue
from cortex.routing.request_cost import Costed, OutputMeans, Spent, choices, estimate
from cortex.routing.slot_holds import SlotHolds
from cortex.routing.tenant_policy import TenantPolicies

__all__ = ["AdmissionControl", "AdmissionOptions", "Claim", "FreeSlots", "Sleep", "Ticket"]

# The model's free slots over its ready replicas, or None: no cap applies.
FreeSlots = Callable[[str], "int | None"]
Sleep = Callable[[float], Awaitable[None]]
# The model's ready replicas (the batch rules are per replica).
Replicas = Callable[[str], int]

# A refused client is told to retry after this: a slot frees when some
# request ends, which cannot be known in advance.
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class Claim:
    """What a request asks of admission: whose it is (its tenant and that
    tenant's weight), its class (already capped) and its estimated tokens."""

    tenant: str = ""
    cls: PriorityClass = DEFAULT_CLASS
    cost: float = 1.0
    weight: float = 1.0

    @property
    def rank(self) -> int:
        return rank(self.cls)


@dataclass
class Ticket:
    """A request admitted: what `settle` needs when it ends."""

    model: str
    claim: Claim
    charged: bool  # counted in the fair queue's virtual time
    settled: bool = False


@dataclass(eq=False)
class _Waiter:
    claim: Claim
    # Its slot (a result) or its refusal to make room for a higher class
    # (an exception).
    granted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    # What the queue orders by (fair_queue.Queued).
    @property
    def tenant(self) -> str:
        return self.claim.tenant

    @property
    def rank(self) -> int:
        return self.claim.rank

    @property
    def cost(self) -> float:
        return self.claim.cost

    @property
    def weight(self) -> float:
        return self.claim.weight

    def was_granted(self) -> bool:
        return (
            self.granted.done()
            and not self.granted.cancelled()
            and self.granted.exception() is None
        )


_Queue = FairQueue[_Waiter] | FifoQueue[_Waiter]


class AdmissionControl:
    def __init__(
        self,
        options: AdmissionOptions,
        free_slots: FreeSlots,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,
        tenants: TenantPolicies | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        """`tenants`: the tenants' weights and classes (default: the
        settings' static `tenants` table); `replicas`: how many ready
        replicas a model has (default: one)."""
        self._options = options
        self._free = free_slots
        self._clock = clock
        self._sleep = sleep
        self._tenants = tenants if tenants is not None else options.static_policies()
        self._queues: dict[str, _Queue] = {}
        # Slots handed to woken waiters that the pool has not dispatched yet.
        self._granted: dict[str, int] = {}
        self._labels: dict[str, str] = {}
        self._means = OutputMeans()
        self._replicas = replicas or (lambda _model: 1)
        # Requests admitted and not settled, per model and class.
        self._running: dict[str, Counter[PriorityClass]] = {}
        self._holds = SlotHolds(sleep, self.wake)

    def depth(self, model: str) -> int:
        """Requests waiting for `model` now."""
        return len(self._queues.get(model, ()))

    def claim(self, request: Costed, tenant: str) -> Claim:
        """What `request` of `tenant` asks: its class capped by the tenant's
        `max_priority`, its estimated tokens, the tenant's weight."""
        policy = self._tenants.policy(tenant)
        asked = DEFAULT_CLASS
        if isinstance(request, pb.GenerateRequest):
            asked = PB_TO_CLASS.get(request.priority, DEFAULT_CLASS)
        return Claim(
            tenant=tenant,
            cls=capped(asked, policy.max_priority),
            cost=estimate(request, self._means),
            weight=policy.weight,
        )

    async def admit(
        self,
        model: str,
        label: str,
        claim: Claim | None = None,
        wait: AdmissionWait | None = None,
    ) -> Ticket:
        """Return when `model`'s request may be dispatched (the caller then
        dispatches it before its next await), or raise ModelOverloadedError.
        `label` is the model as a metrics label; `claim` what the request
        asks (default: the anonymous tenant's, default class); `wait` is
        told how long it waited in the queue, however the wait ended."""
        claim = claim or Claim()
        if not self._options.enabled:
            return Ticket(model, claim, charged=False)
        queue = self._queues.get(model)
        if queue is None:
            queue = self._queues[model] = (
                FairQueue[_Waiter]() if self._options.fair_queuing else FifoQueue[_Waiter]()
            )
        held = self._holds.take(model, label, claim.tenant, claim.rank)
        if held or (not queue.ahead_of(claim.rank) and self._may_take(model, queue, claim.cls)):
            metrics.record_admission_wait(label, 0.0)
            queue.charge(_Waiter(claim))
            self._count(model, claim.cls, 1)
            return Ticket(model, claim, charged=True)
        self._make_room(model, label, queue, claim)
        await self._wait(model, label, queue, _Waiter(claim), wait)
        return Ticket(model, claim, charged=True)

    @contextlib.contextmanager
    def settling(self, ticket: Ticket, spent: Spent) -> Iterator[None]:
        """`settle` when the block ends, however it ends."""
        try:
            yield
        finally:
            self.settle(ticket, spent)

    def settle(self, ticket: Ticket, spent: Spent, freeing: bool = False) -> None:
        """The request of `ticket` ended having used `spent`: correct its
        tenant's charge, and learn the model's output (once: later calls do
        nothing). `freeing`: its slot is still taken and the caller frees
        it next, with no await between (the pool's count goes down and it
        wakes the queue): the slot may be held for the tenant before any
        waiter is handed it."""
        if ticket.settled:
            return
        ticket.settled = True
        claim = ticket.claim
        if isinstance(spent.request, pb.GenerateRequest) and spent.reported:
            self._means.learn(ticket.model, spent.output / choices(spent.request))
        if not ticket.charged:
            return
        self._count(ticket.model, claim.cls, -1)
        queue = self._queues.get(ticket.model)
        if queue is not None:
            queue.correct(claim.tenant, claim.weight, spent.total - claim.cost)
            queue.ended(claim.tenant)
            self._hold(ticket.model, queue, claim, 1 if freeing else 0)
        self.wake(ticket.model)  # one fewer of its class: a batch waiter may go

    def _hold(self, model: str, queue: _Queue, claim: Claim, freeing: int) -> None:
        """Keep the slot `claim`'s request just freed for its tenant's next
        request (slot_holds.py) when others wait and the fair order would
        take that request first. Not for batch work, whose next request is
        in no hurry (and whose slots follow the batch rules)."""
        seconds = self._options.slot_hold_ms / 1000
        if not seconds or claim.cls == BATCH or queue.waiting(claim.tenant):
            return
        if self._holds.holds(model, claim.tenant) or not queue.first_on_return(
            claim.tenant, claim.rank
        ):
            return
        free = self._free(model)
        if (
            free is None
            or free + freeing - self._granted.get(model, 0) - self._holds.count(model) <= 0
        ):
            return
        label = self._labels.get(model, model)
        self._holds.hold(model, label, claim.tenant, claim.rank, seconds)

    def _make_room(self, model: str, label: str, queue: _Queue, claim: Claim) -> None:
        """Refuse the request if its tenant is past its share or the queue is
        full; a full queue makes room for a higher class instead by refusing
        the newest waiter of the lowest class below it."""
        waiting = queue.waiting(claim.tenant)
        bound = self._options.tenant_bound(claim.tenant, claim.weight)
        if bound < self._options.queue_size and waiting >= bound:
            raise _refused(
                model,
                label,
                "tenant_share",
                f"its replicas are busy and this tenant already has {waiting} requests waiting",
            )
        if len(queue) < self._options.queue_size:
            return
        victim = queue.newest_below(claim.rank)
        if victim is None:
            raise _refused(
                model,
                label,
                "queue_full",
                f"its replicas are busy and {len(queue)} requests are already waiting",
            )
        queue.remove(victim)
        victim.granted.set_exception(
            _refused(
                model,
                label,
                "preempted",
                f"its replicas are busy and a request of a higher priority class than "
                f"'{victim.claim.cls}' took this request's place in the queue",
            )
        )

    async def _wait(
        self, model: str, label: str, queue: _Queue, waiter: _Waiter, wait: AdmissionWait | None
    ) -> None:
        queue.push(waiter)
        self._labels[model] = label
        metrics.set_admission_queue_depth(label, len(queue))
        started = self._clock()
        timer = asyncio.ensure_future(self._sleep(self._options.queue_timeout_s))
        try:
            await asyncio.wait({waiter.granted, timer}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # Cancelled (the client left): out of the queue at once, and a
            # slot already handed over goes to the next waiter.
            self._leave(model, waiter)
            raise
        finally:
            timer.cancel()
            waited = self._clock() - started
            metrics.record_admission_wait(label, waited)
            if wait is not None:
                wait.waited(waited)
        if waiter.granted.done():
            waiter.granted.result()  # raises if it was refused for a higher class
            self._granted[model] -= 1  # dispatched by the caller right away
            return
        self._leave(model, waiter)
        raise _refused(
            model,
            label,
            "timeout",
            f"no replica took the request within {self._options.queue_timeout_s:g} s",
        )

    def _leave(self, model: str, waiter: _Waiter) -> None:
        queue = self._queues.get(model)
        if queue is not None:
            queue.remove(waiter)  # False if already popped by a wake-up
            metrics.set_admission_queue_depth(self._labels.get(model, model), len(queue))
        if waiter.was_granted():
            self._granted[model] -= 1
            self._count(model, waiter.claim.cls, -1)
            if queue is not None:
                queue.ended(waiter.tenant)  # granted, never dispatched: never settled
            self.wake(model)
        elif not waiter.granted.done():
            waiter.granted.cancel()

    def _may_take(self, model: str, queue: _Queue, cls: PriorityClass) -> bool:
        """Whether a request of class `cls` may take a slot of `model` now:
        one is free, and with fair queuing the batch rules allow it."""
        free = self._free(model)
        if free is not None:
            free -= self._granted.get(model, 0) + self._holds.count(model)
        if not self._options.fair_queuing:
            return free is None or free > 0
        running = self._running.get(model, Counter())
        # A held slot is a class above batch between two of its requests
        # (batch never holds one): still at work, as far as batch goes.
        others = running.total() > running[BATCH] or self._holds.count(model) > 0
        slots = ModelSlots(
            free=free,
            replicas=self._replicas(model),
            batch_running=running[BATCH],
            others_busy=others or queue.ahead_of(rank(BATCH) - 1),
        )
        return may_take(cls, slots, self._options.batch_rules())

    def _count(self, model: str, cls: PriorityClass, change: int) -> None:
        self._running.setdefault(model, Counter())[cls] += change

    def wake(self, model: str | None = None) -> None:
        """Hand the free slots of `model` (of every model with waiters if
        None) to the waiters the queue's order picks: call whenever a slot
        may have freed."""
        models = [model] if model is not None else list(self._queues)
        for name in models:
            queue = self._queues.get(name)
            if not queue:
                continue
            while queue and self._may_take(name, queue, queue.peek().claim.cls):
                waiter = queue.pop()
                waiter.granted.set_result(None)
                self._granted[name] = self._granted.get(name, 0) + 1
                self._count(name, waiter.claim.cls, 1)
            metrics.set_admission_queue_depth(self._labels.get(name, name), len(queue))


def set_class(request: pb.GenerateRequest, cls: PriorityClass) -> None:
    """Write the admitted class into the request (where the tenant's ceiling
    lowered it), for the neuron's engine."""
    if PB_TO_CLASS.get(request.priority, DEFAULT_CLASS) != cls:
        request.priority = CLASS_TO_PB[cls]


def _refused(model: str, label: str, reason: str, why: str) -> ModelOverloadedError:
    """A request admission turns away, counted by `reason`."""
    metrics.record_admission_rejected(label, reason)
    return ModelOverloadedError(
        f"The model '{model}' is overloaded: {why}. Retry shortly.", retry_after=RETRY_AFTER_S
    )
