"""The power-of-two-choices policy: two candidates drawn at random, the less
loaded of them takes the attempt (Azar et al.: the maximum load drops from
ln n / ln ln n to ln ln n / ln 2 + O(1) compared with one random draw).

Load is `load.effective_load`: this cortex's outstanding count, or the
engine's fresh running + waiting when that is larger; a neuron whose KV
cache is saturated (`load.saturated`) loses to one that is not. Because the draw is
random, several cortex processes do not herd onto the same "least loaded"
neuron between two load reports, which a deterministic least-loaded choice
would. The random generator is passed in, so tests seed it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from cortex.routing.load import effective_load, saturated
from cortex.routing.policy import Candidate, RouteRequest, RoutingPolicy


class PowerOfTwo(RoutingPolicy):
    name = "power_of_two"

    def __init__(
        self,
        *,
        load_max_age_s: float = 2.0,
        kv_limit: float = 0.8,
        rng: random.Random | None = None,
    ) -> None:
        self._max_age = load_max_age_s
        self._kv_limit = kv_limit
        self._rng = rng or random.Random()

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        if not candidates:
            raise ValueError("select needs at least one candidate")
        if len(candidates) == 1:
            return candidates[0]
        first, second = self._rng.sample(range(len(candidates)), 2)
        a, b = candidates[first], candidates[second]
        # Ties go to the first draw, which is itself random.
        return b if self._weight(b, request.now) < self._weight(a, request.now) else a

    def _weight(self, candidate: Candidate, now: float) -> tuple[bool, int]:
        return (
            saturated(candidate, now, self._max_age, self._kv_limit),
            effective_load(candidate, now, self._max_age),
        )
