"""How loaded a candidate is, from this cortex's count and the engine's own.

A candidate's outstanding count covers only the requests *this* cortex
process dispatched; with several cortex processes (or uvicorn workers) each
sees its own share. The engine's running + waiting count (the `Load` RPC,
polled by the pool) covers every sender's requests but is up to a poll
interval old. When the report says what our own count was when it arrived
(`EngineLoad.own`), the estimate is our count now plus what the others had
on the engine then: engine - own, never below 0. Without it, the larger of
the two. The difference matters with one cortex and short requests: a
report taken while 4 requests ran still says 4 for half a second after they
ended, and the larger-of rule read that as load, sending a prefix's
requests off its home (the overflows of `make bench-routing`). A report
older than `max_age_s` is not trusted (a neuron that has emptied since
would keep being avoided) and the outstanding count is used alone.

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
    engine = load.running + load.waiting
    if load.own is None:
        return max(candidate.outstanding, engine)
    return candidate.outstanding + max(engine - load.own, 0)


def saturated(candidate: Candidate, now: float, max_age_s: float, kv_limit: float) -> bool:
    load = candidate.load
    if load is None or load.kv_cache_usage is None or not load.fresh(now, max_age_s):
        return False
    return load.kv_cache_usage >= kv_limit
