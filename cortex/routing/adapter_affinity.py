"""Which replicas a request for a LoRA adapter may go to: those that hold
the adapter, under the same load bound as prefix affinity; on a miss, the
one where loading it costs the least.

A request naming an adapter can run on any replica of its base model, but
one that does not hold it must load it first (seconds, and an eviction
there). So before the routing policy chooses, the candidates are narrowed:

1. the replicas holding the adapter whose load is within the bound
   (load + 1 <= ceil((1 + epsilon) * (total + 1) / n), prefix_affinity's
   `bound`): a hit;
2. none holds it, or every holder is over the bound (a hot adapter): a
   miss, which loads it. Among the replicas within the bound, those where
   the load evicts the least: a free adapter slot first (nothing evicted),
   then the replica whose *victim* (the adapter its engine would evict:
   the least recently used one with no request in flight) has the lowest
   recent request rate across this cortex, so that the adapters asked for
   most stay held somewhere; last, replicas whose adapters are all in use
   (the load waits there for a request to end). Ties are left to the
   policy. A hot adapter thus spreads to more replicas as it gets hotter,
   displacing the coldest adapters first.

Why the rate and not the engine's own order: each engine evicts its least
recently used idle adapter, so on a miss sent at random a popular adapter
that happened to be least recent on that replica was evicted and soon
loaded again. A sequential model of two replicas of two slots, eight
adapters (Zipf 2.0): 29 loads per 100 requests adapter-blind, 12 with the
miss sent at random, 9.3 with the victim's rate deciding (1.5: 45, 22,
17.4). The rate is a request count decayed with a half-life of
`RATE_HALF_LIFE_S` (`AdapterRates`), counted at dispatch.

The policy (prefix affinity, least outstanding...) then chooses among
them as it would among any candidates. Pure: the clock is passed in; the
roster says who holds what (each neuron's Load report, and this cortex's
own dispatches since, `dispatched`: the neuron's least-recently-used order,
played forward), attempts.py applies the result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cortex.routing.load import effective_load
from cortex.routing.policy import Candidate
from cortex.routing.prefix_affinity import bound

# How fast an adapter's request count fades: long enough that a popular
# adapter's count outweighs a burst of a rare one's, short enough that a
# change of popularity shows within a few minutes.
RATE_HALF_LIFE_S = 60.0


@dataclass(frozen=True)
class Holding:
    """What a candidate holds of adapters: whether it holds this request's
    adapter, whether it has room for another without an eviction, and the
    adapter a load there would evict (None: room, or every one in use)."""

    holds: bool
    room: bool
    victim: str | None = None


class AdapterRates:
    """Each adapter's recent request rate: a count decayed exponentially
    with `half_life_s` (lazily: each entry keeps its value and when it was
    last brought up to date)."""

    def __init__(self, half_life_s: float = RATE_HALF_LIFE_S) -> None:
        if half_life_s <= 0:
            raise ValueError("half_life_s must be positive")
        self._half_life = half_life_s
        self._counts: dict[str, tuple[float, float]] = {}  # id -> (count, as of)

    def add(self, adapter: str, now: float) -> None:
        self._counts[adapter] = (self.rate(adapter, now) + 1.0, now)

    def rate(self, adapter: str, now: float) -> float:
        count, stamp = self._counts.get(adapter, (0.0, now))
        return float(count * 0.5 ** (max(now - stamp, 0.0) / self._half_life))


class AdapterAffinity:
    def __init__(
        self,
        epsilon: float = 0.5,
        load_max_age_s: float = 2.0,
        rates: AdapterRates | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.load_max_age_s = load_max_age_s
        self.rates = rates or AdapterRates()

    def requested(self, adapter: str, now: float) -> None:
        """A request for `adapter` was dispatched (its rate goes up)."""
        self.rates.add(adapter, now)

    def narrow(
        self, candidates: Sequence[Candidate], holding: Sequence[Holding], now: float
    ) -> list[int]:
        """The indices of the candidates the policy should choose among
        (never empty for candidates that are not)."""
        loads = [effective_load(c, now, self.load_max_age_s) for c in candidates]
        limit = bound(loads, self.epsilon)
        within = [i for i, load in enumerate(loads) if load + 1 <= limit]
        holders = [i for i in within if holding[i].holds]
        if holders:
            return holders
        costs = {i: self.miss_cost(holding[i], now) for i in within}
        least = min(costs.values(), default=0.0)
        return [i for i in within if costs[i] == least]

    def miss_cost(self, holding: Holding, now: float) -> float:
        """What loading the adapter on a replica costs the others: nothing
        with a free slot (-1, before a victim nobody asked for lately), the
        victim's rate, or, every adapter there in use, the most (the load
        waits for a request to end)."""
        if holding.room:
            return -1.0
        if holding.victim is None:
            return math.inf
        return self.rates.rate(holding.victim, now)


def victim(held: Sequence[str], busy: frozenset[str]) -> str | None:
    """The adapter an engine holding `held` (least recently used first)
    evicts to load another: the least recently used with no request in
    flight (None: every one in use)."""
    return next((a for a in held if a not in busy), None)


def dispatched(
    held: tuple[str, ...], adapter: str, capacity: int, busy: frozenset[str]
) -> tuple[str, ...]:
    """What a replica holds (least recently used first) once a request for
    `adapter` is sent to it, as its engine will have it: the adapter moved
    to the end, and the least recently used adapters not in `busy` (with
    requests in flight) evicted past `capacity`. Between two Load reports
    this keeps cortex from counting an evicted adapter as held."""
    order = [a for a in held if a != adapter] + [adapter]
    while len(order) > capacity:
        idle = victim(order[:-1], busy)
        if idle is None:
            break  # the engine waits for one to end; it evicts nothing yet
        order.remove(idle)
    return tuple(order)


def reported(report: Sequence[str], capacity: int, busy: frozenset[str]) -> tuple[str, ...]:
    """What a replica holds given its engine's report (least recently used
    first) and this cortex's adapters with requests in flight there: a
    busy adapter the report lacks is being loaded (the report was taken
    before its load ended), so it is played forward as a dispatch. Taking
    the report alone forgot it until the next one, and a request for it in
    between loaded it a second time elsewhere."""
    held = tuple(report)
    for adapter in sorted(busy - set(held)):
        held = dispatched(held, adapter, capacity, busy)
    return held
