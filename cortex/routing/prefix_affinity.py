"""The prefix-affinity policy: send a request where its prompt prefix is most
likely cached, under a bound on load (consistent hashing with bounded loads,
Mirrokni et al.; HAProxy's hash-balance-factor).

The pool hands the policy the request's chained prefix-block hashes
(`prefix.py`, asked for through `prefix_hasher`). The choice, in order:

1. Continuing a Responses chain (`previous_response_id`): the neuron that
   served the previous response (the Responses API uses the response id as
   the request id, remembered here when an attempt ends OK).
2. The neuron this policy last dispatched the longest known block of the
   prefix to (block hash -> neuron, remembered at dispatch).
3. The prefix's home: where its first block went (requests sharing a
   system prompt and tools share it), or, for a prefix seen first, a walk
   of the consistent-hash ring from the first block's hash that stops at
   the first neuron with no more than its share of recent homes (a bound
   on cache, beside the one on load below). The ring alone, with 16
   groups on two replicas, homed 11 on one: more traffic and more
   prefixes than its cache held (`make bench-routing`, share 1.38 times
   the average). With the homes bound, prefixes are spread to within one
   of even, and a new prefix still goes to its ring home when that
   neuron holds no more than its share.

Each step takes a neuron only under the bound: a neuron is eligible when
its load + 1 <= ceil((1 + epsilon) * (total load + 1) / n), so none takes
more than (1 + epsilon) times the average (rounded up). When the preferred
neuron is over it, the request *overflows* to the least loaded neuron
within the bound (ties in ring order from the prefix's hash), and the
prefix stays homed where it was: the overflow's neuron owns only the
blocks nobody owned yet (that request's own tail). A group that overflows
now and then thus keeps its cache on its home.

A prefix hotter than one neuron's bound (more of its requests in flight
than the bound lets one neuron carry) has no single home: it goes to the
least loaded neuron, among equals the preferred one (its chain or
conversation), then one that holds the prefix (was sent it): a hit on a
holder, an overflow elsewhere. Filling its home up to the bound first kept
that neuron at 1.5 times the average load and its requests at the tail of
the TTFT (16 sim replicas, one hot prefix: p90 1.13 times
least_outstanding's); preferring its holders up to the bound did the same
to them. A group with a few requests in flight is never hot, so its cache
stays in one place.

A neuron whose KV cache is saturated (`load.saturated`) is passed over
while any candidate is not. A request without a prefix (embeddings) goes
to the least loaded candidate.

Load is `load.effective_load`. With several cortex processes (or uvicorn
workers) each sees only its own outstanding counts; the shared signal is
the engine's fresh running + waiting, which every process polls, so the
bound holds against the whole load to within one poll interval. The ring
is the same in every process (stable hashes), so processes that have never
seen a prefix mostly agree on its home; the homes bound is per process
(each counts the homes it made), so two processes may home a prefix on
different neurons when their ring home held more than its share: each
then warms it once. Steps 1-2 are per process.

Each choice says which step made it (`choose` -> `Decision`): chain,
prefix or home for a hit on the preferred neuron, overflow when one was
passed over for its load, fallback when there was nothing to prefer.

Health, ejection and retries are the pool's: candidates are already the
ready neurons this attempt may use.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

from cortex.routing.load import effective_load, saturated
from cortex.routing.policy import (
    Candidate,
    Choice,
    Decision,
    Outcome,
    RouteRequest,
    RoutingPolicy,
)
from cortex.routing.prefix import PrefixHasher
from cortex.routing.ring import HashRing

K = TypeVar("K")
V = TypeVar("V")


class _Lru(OrderedDict[K, V]):
    """A mapping that forgets its least recently written keys past `size`
    (the policy remembers recent prefixes and chains, not all of them)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size

    def put(self, key: K, value: V) -> list[V]:
        """Writes `key`; returns the values forgotten to make room."""
        self[key] = value
        self.move_to_end(key)
        forgotten = []
        while len(self) > self._size:
            forgotten.append(self.popitem(last=False)[1])
        return forgotten


class _Homes:
    """The neuron each recent prefix (by first block) lives on, and how many
    live on each: the counts the homes bound reads. The oldest prefixes are
    forgotten past `size`, so the counts are of recent traffic."""

    def __init__(self, size: int) -> None:
        self._where: _Lru[int, str] = _Lru(size)
        self._count: Counter[str] = Counter()

    def get(self, first: int) -> str | None:
        return self._where.get(first)

    def count(self, address: str) -> int:
        return self._count[address]

    def put(self, first: int, address: str) -> None:
        old = self._where.pop(first, None)
        if old is not None:
            self._count[old] -= 1
        self._count[address] += 1
        for gone in self._where.put(first, address):
            self._count[gone] -= 1


class PrefixAffinity(RoutingPolicy):
    name = "prefix_affinity"
    decisions = (
        Decision.CHAIN,
        Decision.PREFIX,
        Decision.HOME,
        Decision.OVERFLOW,
        Decision.FALLBACK,
    )

    def __init__(
        self,
        *,
        epsilon: float = 0.25,
        hasher: PrefixHasher | None = None,
        load_max_age_s: float = 2.0,
        kv_limit: float = 0.8,
        virtual_nodes: int = 160,
        max_prefixes: int = 65_536,
        max_chains: int = 16_384,
    ) -> None:
        if epsilon < 0:
            raise ValueError("epsilon must not be negative")
        self.prefix_hasher = hasher or PrefixHasher()
        self._epsilon = epsilon
        self._max_age = load_max_age_s
        self._kv_limit = kv_limit
        self._virtual_nodes = virtual_nodes
        self._owners: _Lru[int, str] = _Lru(max_prefixes)  # block hash -> address
        self._chains: _Lru[str, str] = _Lru(max_chains)  # response id -> address
        self._homes = _Homes(max_prefixes)  # first block -> address
        # (request id, attempt) -> the neuron an overflow chose, until dispatch
        self._overflows: _Lru[tuple[str, int], str] = _Lru(1024)
        # First block -> requests in flight (dispatched, not yet complete),
        # and first block -> neurons it was sent to (the hot-prefix rule).
        self._in_flight: dict[int, int] = {}
        self._holders: _Lru[int, frozenset[str]] = _Lru(max_prefixes)
        self._ring: HashRing | None = None
        self._rotation = itertools.count()

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        return self.choose(candidates, request).candidate

    def choose(self, candidates: Sequence[Candidate], request: RouteRequest) -> Choice:
        if not candidates:
            raise ValueError("select needs at least one candidate")
        loads = [effective_load(c, request.now, self._max_age) for c in candidates]
        limit = bound(loads, self._epsilon)
        full = [saturated(c, request.now, self._max_age, self._kv_limit) for c in candidates]
        avoid_full = not all(full)
        index = {c.address: i for i, c in enumerate(candidates)}

        def eligible(i: int) -> bool:
            return loads[i] + 1 <= limit and not (avoid_full and full[i])

        # The ring order from the prefix's first block: the home first, then
        # the order in which ties among overflow targets are broken (so a
        # group's overflow tends to find the neuron its last overflow warmed).
        # Without a prefix, a rotation, so ties take turns.
        n = len(candidates)
        if request.prefix:
            walk = list(self._ring_for(index).walk(request.prefix[0]))
            position = {index[address]: p for p, address in enumerate(walk)}
        else:
            start = next(self._rotation)
            position = {i: (i - start) % n for i in range(n)}
        preferred = self._preferred(request)
        if request.prefix:
            preferred.append((self._home(request.prefix[0], walk, index), Decision.HOME))

        if request.prefix and self._hot(request.prefix[0], limit):
            return self._spread(candidates, request, preferred, loads, position, eligible)

        # A preferred neuron that is not a candidate (not ready, or already
        # tried) is skipped; one passed over for its load makes the choice
        # an overflow.
        passed_over = False
        for address, kind in preferred:
            i = index.get(address)
            if i is None:
                continue
            if eligible(i):
                return self._chosen(request, candidates[i], passed_over, kind)
            passed_over = True

        # Overflow (or nothing to prefer): the least loaded neuron within the
        # bound (the least loaded always is), unsaturated first, ties in ring
        # order. Not the next neuron on the ring: a hot prefix then filled
        # one neuron after another up to the bound (with 16 neurons at ~2
        # in flight the bound is 4, twice the average) while the rest idled.
        def rank(i: int) -> tuple[bool, bool, int, int]:
            return (loads[i] + 1 > limit, avoid_full and full[i], loads[i], position[i])

        chosen = candidates[min(range(n), key=rank)]
        return self._chosen(request, chosen, passed_over, Decision.FALLBACK)

    def _spread(
        self,
        candidates: Sequence[Candidate],
        request: RouteRequest,
        preferred: list[tuple[str, Decision]],
        loads: list[int],
        position: dict[int, int],
        eligible: Callable[[int], bool],
    ) -> Choice:
        """A hot prefix's choice: the least loaded neuron within the bound;
        among equals the preferred one (its chain or conversation), then one
        that holds the prefix, then ring order."""
        present = {c.address for c in candidates}
        first = next(
            ((a, k) for a, k in preferred if k is not Decision.HOME and a in present), None
        )
        holders = self._holders.get(request.prefix[0], frozenset())

        def rank(j: int) -> tuple[bool, int, bool, bool, int]:
            address = candidates[j].address
            return (
                not eligible(j),
                loads[j],
                first is None or address != first[0],
                address not in holders,
                position[j],
            )

        chosen = candidates[min(range(len(candidates)), key=rank)]
        if first is not None and chosen.address == first[0]:
            return Choice(chosen, first[1])
        return self._chosen(request, chosen, chosen.address not in holders, Decision.PREFIX)

    def _chosen(
        self, request: RouteRequest, candidate: Candidate, passed_over: bool, kind: Decision
    ) -> Choice:
        if not passed_over:
            return Choice(candidate, kind)
        # Told to `on_dispatch`, which then leaves the prefix's owner alone.
        self._overflows.put((request.request_id, request.attempt), candidate.address)
        return Choice(candidate, Decision.OVERFLOW)

    def on_dispatch(self, candidate: Candidate, request: RouteRequest) -> None:
        # Remembered at dispatch, not at the end: a burst of requests sharing
        # a long prefix should follow the first one while it still runs.
        # An overflow keeps the prefix homed: only blocks nobody owns yet
        # (the request's own tail, e.g. its conversation) go to the neuron
        # that took it. Moving the owner on every overflow spread each
        # group over both caches of two replicas (hit rate 0.60, where
        # keeping it gives each group one cache).
        overflow = self._overflows.pop((request.request_id, request.attempt), None)
        keep = overflow == candidate.address
        for block in request.prefix:
            if keep and block in self._owners:
                continue
            self._owners.put(block, candidate.address)
        if request.prefix:
            first = request.prefix[0]
            # The home is where the first block is owned (the same rule).
            self._homes.put(first, self._owners.get(first, candidate.address))
            self._in_flight[first] = self._in_flight.get(first, 0) + 1
            held = self._holders.get(first, frozenset())
            if candidate.address not in held:  # a new set only when one joins
                held |= {candidate.address}
            self._holders.put(first, held)

    def on_complete(self, address: str, request: RouteRequest, outcome: Outcome) -> None:
        if outcome is Outcome.OK:
            self._chains.put(request.request_id, address)
        if request.prefix:
            first = request.prefix[0]
            left = self._in_flight.get(first, 0) - 1
            if left > 0:
                self._in_flight[first] = left
            else:
                self._in_flight.pop(first, None)

    def _home(self, first: int, walk: list[str], index: dict[str, int]) -> str:
        """Where the prefix lives if that neuron is a candidate; else the
        first neuron of the ring walk holding no more than its share of
        homes: count + 1 <= ceil((total + 1) / n), which the neuron with
        the fewest always meets."""
        home = self._homes.get(first)
        if home is not None and home in index:
            return home
        total = sum(self._homes.count(a) for a in walk)
        share = math.ceil((total + 1) / len(walk))
        return next(a for a in walk if self._homes.count(a) + 1 <= share)

    def _hot(self, first: int, limit: int) -> bool:
        """More requests of this prefix in flight, with this one, than one
        neuron may carry."""
        return self._in_flight.get(first, 0) + 1 > limit

    def _preferred(self, request: RouteRequest) -> list[tuple[str, Decision]]:
        preferred = []
        previous = request.hints.previous_response_id
        if previous is not None and previous in self._chains:
            preferred.append((self._chains[previous], Decision.CHAIN))
        for block in reversed(request.prefix):
            owner = self._owners.get(block)
            if owner is not None:
                preferred.append((owner, Decision.PREFIX))
                break
        return preferred

    def _ring_for(self, index: dict[str, int]) -> HashRing:
        # The candidates are the same set for most requests; rebuild only
        # when it changes (a neuron joins, leaves, or is excluded on a retry).
        addresses = frozenset(index)
        if self._ring is None or self._ring.addresses != addresses:
            self._ring = HashRing(addresses, self._virtual_nodes)
        return self._ring


def bound(loads: Sequence[int], epsilon: float) -> int:
    """The most load one neuron may carry after taking one more request:
    ceil((1 + epsilon) * (total + 1) / n)."""
    return math.ceil((1 + epsilon) * (sum(loads) + 1) / len(loads))
