"""The order in which a model's waiting requests get replica slots: weighted
fair queuing across tenants over tokens, priority classes above it, or
plain first come, first served (`FifoQueue`, the order before tenants had
weights; the benchmark's baseline).

`FairQueue` is start-time fair queuing (Goyal et al., 1996) over tenants,
the tags kept per tenant rather than per request:

- each tenant has a virtual time F: where its next request starts; a
  tenant is active while it has requests waiting or running, and the queue
  has a virtual time V, the smallest F among the active tenants;
- a tenant that becomes active is moved up to V if it was behind: time it
  spent idle is not owed to it;
- a slot goes to the waiting tenant with the smallest F (ties: the one
  with fewer requests running, then whose request came first), or at once
  to a request that finds nobody waiting;
  either moves F on by cost / weight, where cost is
  the request's tokens (its prompt plus its expected output,
  `request_cost.py`);
- when a request ends, its charge is corrected by the tokens it really used
  (`correct`), so a tenant whose requests stop early is not held back for
  the output they never made. V follows the active tenants' F (it is not
  the last start tag, which corrections would leave ahead of every tenant,
  collapsing them all onto it and the order onto arrival order); a tenant
  whose requests all run, none waiting for a moment, keeps its place. V
  follows corrections too: a tenant arriving after another's charge came
  down starts level with it, not ahead of it by the refund.

So backlogged tenants get tokens in proportion to their weights, and a
tenant that was idle starts at V, level with the backlogged tenant next in
line, and wins the tie with it (it has nothing running): its request
takes the next slot that frees, not one after the backlogs (ties broken
by arrival made it wait for one more request of the backlogged tenant,
two slots to free: the quiet tenant of `make bench-fairness`). Within a
tenant requests keep their order.

Priority classes come first: a waiting request of a higher class is always
taken before any of a lower one; within a class, the fair order. Each
tenant keeps one F across its classes (fairness is over what it consumed).

Picking is a scan over the tenants with waiters of the highest class
waiting (and V over all waiting tenants): O(tenants waiting), a handful in
practice, and no tags to redo when a correction moves a tenant's F.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

# Past this many tenants remembered, the ones with nothing waiting and an
# F at or behind V are forgotten: max(V, F) = V for them anyway.
_FORGET_PAST = 1024


class Queued(Protocol):
    """What the queue needs to know of a waiting request."""

    @property
    def tenant(self) -> str: ...

    @property
    def rank(self) -> int: ...  # its class's rank: 0 is the highest

    @property
    def cost(self) -> float: ...  # tokens it is expected to use

    @property
    def weight(self) -> float: ...  # its tenant's weight (> 0)


Q = TypeVar("Q", bound=Queued)


def _count_down(counts: dict[str, int], tenant: str) -> int:
    """One fewer of `tenant`'s; at none it leaves `counts`, so that the
    tenants in it are those with any. Returns how many are left."""
    left = counts[tenant] - 1
    if left:
        counts[tenant] = left
    else:
        del counts[tenant]
    return left


@dataclass
class _Lane(Generic[Q]):
    """One tenant's waiting requests of one class, in arrival order (each
    with its arrival number, for ties)."""

    waiting: deque[tuple[int, Q]] = field(default_factory=deque)


class FairQueue(Generic[Q]):
    def __init__(self) -> None:
        # rank -> tenant -> its lane; empty lanes and ranks are removed.
        self._ranks: dict[int, dict[str, _Lane[Q]]] = {}
        self._finish: dict[str, float] = {}  # each tenant's F
        self._per_tenant: dict[str, int] = {}  # waiting
        self._active: dict[str, int] = {}  # waiting or running
        self._vtime = 0.0
        self._arrivals = 0
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def waiting(self, tenant: str) -> int:
        """How many of `tenant`'s requests wait."""
        return self._per_tenant.get(tenant, 0)

    def push(self, item: Q) -> None:
        self._enter(item.tenant)
        lanes = self._ranks.setdefault(item.rank, {})
        lane = lanes.get(item.tenant)
        if lane is None:
            lane = lanes[item.tenant] = _Lane()
        self._arrivals += 1
        lane.waiting.append((self._arrivals, item))
        self._per_tenant[item.tenant] = self.waiting(item.tenant) + 1
        self._len += 1

    def peek(self) -> Q:
        """The request `pop` would return."""
        rank, tenant = self._next()
        return self._ranks[rank][tenant].waiting[0][1]

    def pop(self) -> Q:
        """The request that gets the next slot, charged to its tenant."""
        rank, tenant = self._next()
        _, item = self._ranks[rank][tenant].waiting[0]
        self._take(rank, tenant, 0)
        self._finish[tenant] += item.cost / item.weight
        self._follow()
        if len(self._finish) > _FORGET_PAST:
            self._forget()
        return item

    def ahead_of(self, rank: int) -> bool:
        """Whether a waiting request goes before a newcomer of class `rank`
        (one of its class or a higher one waits)."""
        return min(self._ranks, default=rank + 1) <= rank

    def first_on_return(self, tenant: str, rank: int) -> bool:
        """Whether a request of `tenant` (nothing of it waiting) and class
        `rank` arriving now would be taken before every request waiting:
        a slot it just freed is then worth holding for it (slot_holds.py).
        False when nothing waits."""
        if not self._ranks:
            return False
        top = min(self._ranks)
        if rank != top:
            return rank < top
        finish = self._finish.get(tenant, self._vtime)
        running = self._active.get(tenant, 0)
        if not running:
            finish = max(self._vtime, finish)  # as `_enter` would place it
        lanes = self._ranks[top]
        best = min((self._finish[t], self._active[t] - self._per_tenant[t]) for t in lanes)
        return (finish, running) < best

    def charge(self, item: Q) -> None:
        """`item` gets a slot at once (nobody waits): its tenant's virtual
        time moves on by its cost, from V at least."""
        self._enter(item.tenant)
        self._finish[item.tenant] += item.cost / item.weight
        self._follow()

    def ended(self, tenant: str) -> None:
        """A request of `tenant` that got its slot has ended."""
        self._leave(tenant)

    def remove(self, item: Q) -> bool:
        """Take `item` out without charging anyone (it left); False if it
        was not waiting."""
        lane = self._ranks.get(item.rank, {}).get(item.tenant)
        if lane is None:
            return False
        for i, (_, queued) in enumerate(lane.waiting):
            if queued is item:
                self._take(item.rank, item.tenant, i)
                self._leave(item.tenant)
                return True
        return False

    def newest_below(self, rank: int) -> Q | None:
        """The request to refuse to make room for one of class `rank`: the
        last to arrive of the lowest class waiting, if that class is lower
        than `rank` (None: nothing lower waits)."""
        lowest = max(self._ranks, default=rank)
        if lowest <= rank:
            return None
        newest = max(lane.waiting[-1] for lane in self._ranks[lowest].values())
        return newest[1]

    def correct(self, tenant: str, weight: float, tokens: float) -> None:
        """A finished request of `tenant` used `tokens` more than it was
        charged (fewer when negative): move its finish time by as much."""
        if tenant in self._finish:
            self._finish[tenant] += tokens / weight
            # V is the smallest active F: left at the charge, it would start
            # a tenant arriving now a refund behind one whose charge came down.
            self._follow()

    def __iter__(self) -> Iterator[Q]:
        for lanes in self._ranks.values():
            for lane in lanes.values():
                yield from (item for _, item in lane.waiting)

    def _enter(self, tenant: str) -> None:
        """One more request of `tenant` waiting or running; one that was not
        active starts at V at the earliest."""
        if tenant not in self._active:
            self._finish[tenant] = max(self._vtime, self._finish.get(tenant, self._vtime))
            self._active[tenant] = 0
        self._active[tenant] += 1

    def _leave(self, tenant: str) -> None:
        if not _count_down(self._active, tenant):
            self._follow()

    def _follow(self) -> None:
        """V: the smallest F of the active tenants (unchanged when none is)."""
        if self._active:
            self._vtime = min(self._finish[t] for t in self._active)

    def _next(self) -> tuple[int, str]:
        """The class and tenant of the next request: the highest class
        waiting, then the smallest F; at equal F the tenant with fewer
        requests running (a tenant just back from idle, level with a
        backlogged one at V, takes the next slot rather than the one
        after it), then whose request came first."""
        rank = min(self._ranks)
        lanes = self._ranks[rank]

        def order(tenant: str) -> tuple[float, int, int]:
            running = self._active[tenant] - self._per_tenant[tenant]
            return self._finish[tenant], running, lanes[tenant].waiting[0][0]

        return rank, min(lanes, key=order)

    def _take(self, rank: int, tenant: str, index: int) -> None:
        lanes = self._ranks[rank]
        waiting = lanes[tenant].waiting
        del waiting[index]
        if not waiting:
            del lanes[tenant]
            if not lanes:
                del self._ranks[rank]
        _count_down(self._per_tenant, tenant)
        self._len -= 1

    def _forget(self) -> None:
        for tenant, finish in list(self._finish.items()):
            # Activation would move them up to V anyway.
            if finish <= self._vtime and tenant not in self._active:
                del self._finish[tenant]


class FifoQueue(Generic[Q]):
    """First come, first served, whatever the tenant or class: the order
    admission had before fair queuing (`fair_queuing = false`)."""

    def __init__(self) -> None:
        self._waiting: deque[Q] = deque()
        self._per_tenant: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def waiting(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)

    def push(self, item: Q) -> None:
        self._waiting.append(item)
        self._per_tenant[item.tenant] = self.waiting(item.tenant) + 1

    def peek(self) -> Q:
        return self._waiting[0]

    def ahead_of(self, rank: int) -> bool:
        return bool(self._waiting)  # nobody overtakes in arrival order

    def pop(self) -> Q:
        item = self._waiting.popleft()
        _count_down(self._per_tenant, item.tenant)
        return item

    def remove(self, item: Q) -> bool:
        for i, queued in enumerate(self._waiting):
            if queued is item:
                del self._waiting[i]
                _count_down(self._per_tenant, item.tenant)
                return True
        return False

    def first_on_return(self, tenant: str, rank: int) -> bool:
        return False  # a newcomer goes behind every waiter

    def charge(self, item: Q) -> None:
        return None  # nothing is charged in arrival order

    def ended(self, tenant: str) -> None:
        return None

    def newest_below(self, rank: int) -> Q | None:
        return None  # no classes in FIFO order: nobody is refused for another

    def correct(self, tenant: str, weight: float, tokens: float) -> None:
        return None  # nothing charged

    def __iter__(self) -> Iterator[Q]:
        return iter(self._waiting)
