"""How loaded a candidate is, from this cortex's count and the engine's own.

A candidate's outstanding count covers only the requests *this* cortex
process dispatched; with several cortex processes (or uvicorn workers) each
sees its own share. The engine's running + waiting count (the `Load` RPC,
polled by the pool) covers every sender's requests but is up to a poll
interval old. The estimate is the larger of the two: the engine's count
already includes ours once it has seen them, and ours is the more recent
for requests dispatched since its last report. A report older than
`max_age_s` is not trusted (a neuron that has emptied since would keep
being avoided) and the outstanding count is used alone.

Every policy that weighs load uses this one function, so they agree on it.
"""

from __future__ import annotations

from cortex.routing.policy import Candidate


def effective_load(candidate: Candidate, now: float, max_age_s: float) -> int:
    load = candidate.load
    if load is None or not load.fresh(now, max_age_s):
        return candidate.outstanding
    return max(candidate.outstanding, load.running + load.waiting)
