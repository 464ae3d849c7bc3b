"""Which replicas a request for a LoRA adapter may go to: those that hold
the adapter, under the same load bound as prefix affinity.

A request naming an adapter can run on any replica of its base model, but
one that does not hold it must load it first (seconds, and an eviction
there). So before the routing policy chooses, the candidates are narrowed:

1. the replicas holding the adapter whose load is within the bound
   (load + 1 <= ceil((1 + epsilon) * (total + 1) / n), prefix_affinity's
   `bound`): a hit;
2. none holds it, or every holder is over the bound (a hot adapter): the
   replicas within the bound with a free adapter slot, so that the load
   evicts nothing; failing those, every replica within the bound. The
   adapter then loads where the policy sends it, and spreads to more
   replicas as it gets hotter.

The policy (prefix affinity, least outstanding...) then chooses among
them as it would among any candidates. Pure: the roster says who holds
what (each neuron's Load report, and this cortex's own dispatches since,
`dispatched`: the neuron's least-recently-used order, played forward),
attempts.py applies the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cortex.routing.load import effective_load
from cortex.routing.policy import Candidate
from cortex.routing.prefix_affinity import bound


@dataclass(frozen=True)
class Holding:
    """What a candidate holds of adapters: whether it holds this request's
    adapter, and whether it has room for another without an eviction."""

    holds: bool
    room: bool


@dataclass(frozen=True)
class AdapterAffinity:
    epsilon: float = 0.5
    load_max_age_s: float = 2.0

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
        roomy = [i for i in within if holding[i].room]
        return roomy or within


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
        idle = next((a for a in order[:-1] if a not in busy), None)
        if idle is None:
            break  # the engine waits for one to end; it evicts nothing yet
        order.remove(idle)
    return tuple(order)
