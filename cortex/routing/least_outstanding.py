"""The least-outstanding policy: the candidate with the fewest requests this
cortex has in flight on it, ties taken in turn.

It reads only `Candidate.outstanding`; engine load and affinity hints are
ignored (later policies use them).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from cortex.routing.policy import Candidate, RouteRequest, RoutingPolicy


class LeastOutstanding(RoutingPolicy):
    name = "least_outstanding"

    def __init__(self) -> None:
        self._rotation = itertools.count()

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        if not candidates:
            raise ValueError("select needs at least one candidate")
        # Ties rotate so that equal neurons share the work: without it an idle
        # pool would send every sequential request to the first neuron.
        start = next(self._rotation)
        n = len(candidates)
        best = min(range(n), key=lambda i: (candidates[i].outstanding, (i - start) % n))
        return candidates[best]
