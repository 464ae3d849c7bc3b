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

Counts miss long contexts filling one engine's KV cache, so a neuron whose
fresh KV-cache usage is at or past `kv_limit` is *saturated*: policies
avoid it while another candidate is not (llm-d's saturation detector trips
at 0.8). vLLM counts only blocks held by requests, not evictable cached
prefixes, so a high value means memory pressure, not a warm cache.

Every policy that weighs load uses this one function, so they agree on it.
"""

from __future__ import annotations

from cortex.routing.policy import Candidate


def effective_load(candidate: Candidate, now: float, max_age_s: float) -> int:
    load = candidate.load
    if load is None or not load.fresh(now, max_age_s):
        return candidate.outstanding
    return max(candidate.outstanding, load.running + load.waiting)


def saturated(candidate: Candidate, now: float, max_age_s: float, kv_limit: float) -> bool:
    load = candidate.load
    if load is None or load.kv_cache_usage is None or not load.fresh(now, max_age_s):
        return False
    return load.kv_cache_usage >= kv_limit
