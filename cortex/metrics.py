"""Every Prometheus metric cortex exports, declared in one place, and the
typed functions that record them.

Names follow Prometheus conventions: base units (seconds), `_total` counters.
Labels stay low-cardinality: `api` is chat, completions, embeddings or
responses; `model` is a served or configured model id (anything else a client
sends is counted as "unknown"); `replica` is a neuron address from the
configuration; `outcome` is success, client_error, server_error or cancelled;
`policy` a routing policy's name and `decision` the kind of its choice
(cortex/routing/policy.py's `Decision`).
Never a request id or a user string.

With several uvicorn workers, prometheus_client's multiprocess mode
(PROMETHEUS_MULTIPROC_DIR, set by cortex.main before this module is imported)
adds up the workers' values; gauges declare how.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import REGISTRY as DEFAULT_REGISTRY

from cortex.shutdown import CUTOFF
from neuraxis.core.errors import NeuraxisError, mapping_for
from neuraxis.core.v1 import neuron_pb2 as pb

log = logging.getLogger("neuraxis.cortex.requests")

UNKNOWN_MODEL = "unknown"

# LLM latencies: a first token in tens of milliseconds on a GPU to tens of
# seconds on a loaded CPU; gaps between tokens from a few ms to ~1 s.
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)
_ITL_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5)
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)

REQUESTS = Counter("neuraxis_requests", "API requests by outcome.", ["api", "model", "outcome"])
REQUEST_DURATION = Histogram(
    "neuraxis_request_duration_seconds",
    "Time from receiving a request to its last byte.",
    ["api", "model"],
    buckets=_DURATION_BUCKETS,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "neuraxis_time_to_first_token_seconds",
    "Time from receiving a generation request to its first output.",
    ["api", "model"],
    buckets=_TTFT_BUCKETS,
)
INTER_TOKEN_LATENCY = Histogram(
    "neuraxis_inter_token_latency_seconds",
    "Time between consecutive outputs of a streamed generation.",
    ["api", "model"],
    buckets=_ITL_BUCKETS,
)
PROMPT_TOKENS = Counter("neuraxis_prompt_tokens", "Prompt tokens processed.", ["api", "model"])
OUTPUT_TOKENS = Counter("neuraxis_output_tokens", "Tokens generated.", ["api", "model"])
IN_FLIGHT = Gauge(
    "neuraxis_requests_in_flight",
    "Requests being served (dispatched to a neuron, not finished).",
    ["model"],
    multiprocess_mode="livesum",
)
QUEUED = Gauge(
    "neuraxis_requests_queued",
    "Dispatched requests still waiting for their first output.",
    ["model"],
    multiprocess_mode="livesum",
)
ROUTED = Counter(
    "neuraxis_routing_decisions", "Requests routed to each replica.", ["model", "replica"]
)
POLICY_DECISIONS = Counter(
    "neuraxis_routing_policy_decisions",
    "Requests routed to each replica, by routing policy and kind of decision: chain, "
    "prefix or home (a hit on the preferred replica), overflow (the preferred one was "
    "over the load bound), fallback (nothing to prefer), balanced (a load-only policy).",
    ["model", "replica", "policy", "decision"],
)
RETRIES = Counter(
    "neuraxis_retries",
    "Requests retried elsewhere after a replica failed before the first token.",
    ["model", "replica"],
)
EJECTIONS = Counter(
    "neuraxis_replica_ejections",
    "Times a replica was ejected for failing requests in a row (outlier ejection).",
    ["replica"],
)
RETRIES_REFUSED = Counter(
    "neuraxis_retries_refused",
    "Retries not made: the retry budget was spent, or an engine had died during the request.",
    ["model"],
)
REPLICA_UP = Gauge(
    "neuraxis_replica_up",
    "1 if the replica answers and its engine is ready, else 0.",
    ["replica"],
    multiprocess_mode="max",
)
HEALTHY_REPLICAS = Gauge(
    "neuraxis_model_healthy_replicas",
    "Ready replicas serving each served or configured model.",
    ["model"],
    multiprocess_mode="max",
)

ADMISSION_QUEUE_DEPTH = Gauge(
    "neuraxis_admission_queue_depth",
    "Requests waiting in each model's admission queue (its replicas at their caps).",
    ["model"],
    multiprocess_mode="livesum",
)
ADMISSION_REJECTIONS = Counter(
    "neuraxis_admission_rejections",
    "Requests refused with 503 model_overloaded, by reason: queue_full or timeout.",
    ["model", "reason"],
)
ADMISSION_WAIT = Histogram(
    "neuraxis_admission_queue_wait_seconds",
    "Time a request waited for a replica slot (0 when one was free), refused ones included.",
    ["model"],
    buckets=(0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
RATE_LIMITED = Counter(
    "neuraxis_rate_limited",
    "Requests refused with 429 by a key's rate limits, by the key's tenant and the limit: "
    "requests, tokens or concurrency.",
    ["tenant", "reason"],
)


STORED_RESPONSES = Counter(
    "neuraxis_stored_responses", "Responses written to the Responses store.", ["backend"]
)
STORE_WRITE = Histogram(
    "neuraxis_store_write_seconds",
    "Time to write a response durably to the Responses store.",
    ["backend"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
STORE_ERRORS = Counter(
    "neuraxis_store_errors",
    "Responses store operations that failed (disk full, database down), by operation.",
    ["backend", "op"],
)
PURGED_RESPONSES = Counter(
    "neuraxis_responses_purged",
    "Stored responses deleted by the retention purge (responses_ttl_days).",
    ["backend"],
)
EXPIRED_LEASES = Counter(
    "neuraxis_responses_lease_expired",
    "Running responses marked failed because the instance running them stopped "
    "renewing their lease.",
    ["backend"],
)
DROPPED_TOOLS = Counter(
    "neuraxis_dropped_tools",
    "Hosted tools (web search, MCP, ...) this server cannot run, left out of what "
    "the model sees, by tool type.",
    ["api", "type"],
)

# The control plane as this cortex sees it (cortex/cluster/plane.py). With
# several workers each follows the controller itself: the gauges take the
# worst worker (min seen, max age) and the counters add up every worker's
# count (N workers count each event N times). Labelled with the head's
# host:port: the series exist only in cluster mode.
CONTROLLER_UP = Gauge(
    "neuraxis_controller_up",
    "1 while the controller answers this cortex's polls of the endpoint table, else 0.",
    ["head"],
    multiprocess_mode="min",
)
HEAD_UP = Gauge(
    "neuraxis_ray_head_up",
    "1 while the Ray head's GCS port accepts connections, else 0.",
    ["head"],
    multiprocess_mode="min",
)
TABLE_AGE = Gauge(
    "neuraxis_endpoint_table_age_seconds",
    "Seconds since the controller last confirmed the endpoint table cortex routes on "
    "(a long poll answers at least every 20 s while the controller is there).",
    ["head"],
    multiprocess_mode="max",
)
CONTROLLER_RESTARTS = Counter(
    "neuraxis_controller_restarts",
    "Times a new controller replaced the one this cortex followed.",
    ["head"],
)
ADOPTED_REPLICAS = Counter(
    "neuraxis_controller_adopted_replicas",
    "Running replicas a new controller adopted (no reload) when it replaced the old one.",
    ["head"],
)


def outcome_of(error: BaseException) -> str:
    if isinstance(error, NeuraxisError):
        return "client_error" if mapping_for(error).http_status < 500 else "server_error"
    return "server_error"


def record_rejected(api: str, model: str, error: BaseException) -> None:
    """A request that failed before it was routed (validation, unknown model)."""
    REQUESTS.labels(api, model, outcome_of(error)).inc()


@dataclass
class Tracker:
    """Follows one routed request from dispatch to its end: its metrics (when
    enabled) and its log line (sizes and timings, never text). A request may
    fan out into several neuron streams (a legacy completion with a list of
    prompts): it ends when all of them have, or when one fails."""

    api: str
    model: str
    request_id: str
    parts: int = 1
    record: bool = True
    started: float = field(default_factory=time.perf_counter)
    _last: float | None = None
    _ttft: float | None = None
    _done: bool = False
    _prompt_tokens: int = 0
    _output_tokens: int = 0
    # The inter-token histogram's child, looked up once: `output` runs for
    # every token, and a labels() lookup (a lock and a dict) each time made
    # it cost 1.3 us instead of 0.6 us.
    _itl: Histogram | None = None

    def __post_init__(self) -> None:
        if self.record:
            IN_FLIGHT.labels(self.model).inc()
            QUEUED.labels(self.model).inc()
            self._itl = INTER_TOKEN_LATENCY.labels(self.api, self.model)

    def output(self) -> None:
        now = time.perf_counter()
        if self._last is None:
            self._ttft = now - self.started
            if self.record:
                TIME_TO_FIRST_TOKEN.labels(self.api, self.model).observe(self._ttft)
                QUEUED.labels(self.model).dec()
        elif self._itl is not None:
            self._itl.observe(now - self._last)
        self._last = now

    def part_done(self, prompt_tokens: int, output_tokens: int) -> None:
        self._prompt_tokens += prompt_tokens
        self._output_tokens += output_tokens
        self.parts -= 1
        if self.parts <= 0:
            self.finish("success")

    def finish(self, outcome: str) -> None:
        if self._done:
            return
        self._done = True
        duration = time.perf_counter() - self.started
        if self.record:
            if self._last is None:
                QUEUED.labels(self.model).dec()
            IN_FLIGHT.labels(self.model).dec()
            REQUESTS.labels(self.api, self.model, outcome).inc()
            REQUEST_DURATION.labels(self.api, self.model).observe(duration)
            if self._prompt_tokens:
                PROMPT_TOKENS.labels(self.api, self.model).inc(self._prompt_tokens)
            if self._output_tokens:
                OUTPUT_TOKENS.labels(self.api, self.model).inc(self._output_tokens)
        log.info(
            "%s %s",
            self.api,
            outcome,
            extra={
                "request_id": self.request_id,
                "api": self.api,
                "model": self.model,
                "outcome": outcome,
                "duration_s": round(duration, 4),
                "ttft_s": round(self._ttft, 4) if self._ttft is not None else None,
                "prompt_tokens": self._prompt_tokens,
                "output_tokens": self._output_tokens,
            },
        )


async def tracked(
    stream: AsyncIterator[pb.GenerateResponse],
    tracker: Tracker,
    on_end: Callable[[int | None], None] | None = None,
) -> AsyncIterator[pb.GenerateResponse]:
    """A neuron stream, observed: first output, gaps, tokens, outcome.

    `on_end` (a rate-limited key's reservation) hears the tokens the stream
    used when it ends: its usage, 0 when it failed before reporting any,
    None when it was dropped before its usage arrived (the client left; the
    engine may have spent the tokens). Here rather than in a wrapper of its
    own: every layer of async generator costs each token of every stream."""
    ended = False
    used: int | None = None
    try:
        # Read through the cutoff: a server that stops ends it with its error.
        async for response in CUTOFF.guard(stream):
            if response.choices:
                tracker.output()
            if response.HasField("usage"):
                ended = True
                prompt, output = response.usage.prompt_tokens, response.usage.completion_tokens
                used = prompt + output
                tracker.part_done(prompt, output)
            yield response
    except Exception as e:
        used = 0 if used is None else used  # failed: what it did not use goes back
        tracker.finish(outcome_of(e))
        raise
    finally:
        if not ended:  # dropped before its end: the client went away
            tracker.finish("cancelled")
        if on_end is not None:
            on_end(used)


def record_routed(model: str, replica: str) -> None:
    """A request dispatched to a replica (each attempt counts)."""
    if _enabled:
        ROUTED.labels(model, replica).inc()


def record_decision(model: str, replica: str, policy: str, decision: str) -> None:
    """A request dispatched to a replica, with the policy's kind of decision."""
    if _enabled:
        POLICY_DECISIONS.labels(model, replica, policy, decision).inc()


def touch_decisions(model: str, replica: str, policy: str, decisions: Sequence[str]) -> None:
    """Export each kind of decision `policy` makes at 0 for a replica."""
    for decision in decisions:
        POLICY_DECISIONS.labels(model, replica, policy, decision)


def record_retry(model: str, replica: str) -> None:
    """A request retried elsewhere after `replica` failed before its first token."""
    if _enabled:
        RETRIES.labels(model, replica).inc()


def record_dropped_tool(api: str, kind: str) -> None:
    """A hosted tool left out of a request (`kind`: its tool type, a closed set)."""
    if _enabled:
        DROPPED_TOOLS.labels(api, kind).inc()


def record_ejection(replica: str) -> None:
    """A replica ejected by outlier ejection."""
    if _enabled:
        EJECTIONS.labels(replica).inc()


def record_retry_refused(model: str) -> None:
    """A retry the budget (or an engine's death) did not allow."""
    if _enabled:
        RETRIES_REFUSED.labels(model).inc()


def record_admission_wait(model: str, seconds: float) -> None:
    """A request admitted or refused after waiting `seconds` for a slot."""
    if _enabled:
        ADMISSION_WAIT.labels(model).observe(seconds)


def record_admission_rejected(model: str, reason: str) -> None:
    """A request refused by admission control (`reason`: queue_full, timeout)."""
    if _enabled:
        ADMISSION_REJECTIONS.labels(model, reason).inc()


def set_admission_queue_depth(model: str, depth: int) -> None:
    if _enabled:
        ADMISSION_QUEUE_DEPTH.labels(model).set(depth)


def record_rate_limited(tenant: str, reason: str) -> None:
    """A request refused by its key's limits (tenants are the operator's
    own names, made with `neuraxis keys create`: a bounded set)."""
    if _enabled:
        RATE_LIMITED.labels(tenant, reason).inc()


def record_store_write(backend: str, seconds: float) -> None:
    """A response written to the Responses store."""
    if _enabled:
        STORE_WRITE.labels(backend).observe(seconds)
        STORED_RESPONSES.labels(backend).inc()


def record_store_error(backend: str, op: str) -> None:
    """A Responses store operation that failed (op: put, renew, expire, purge, claim)."""
    if _enabled:
        STORE_ERRORS.labels(backend, op).inc()


def record_purged(backend: str, count: int) -> None:
    """Stored responses past their retention, deleted."""
    if _enabled:
        PURGED_RESPONSES.labels(backend).inc(count)


def record_lease_expired(backend: str) -> None:
    """A running response failed because its lease expired."""
    if _enabled:
        EXPIRED_LEASES.labels(backend).inc()


def touch_replica(model: str, replica: str) -> None:
    """Export a replica's counters at 0 before anything happens to them, so
    that rates and dashboards see the series from the start."""
    ROUTED.labels(model, replica)
    RETRIES.labels(model, replica)
    for reason in ("queue_full", "timeout"):
        ADMISSION_REJECTIONS.labels(model, reason)
    ADMISSION_QUEUE_DEPTH.labels(model)


def touch_store(backend: str) -> None:
    STORED_RESPONSES.labels(backend)
    STORE_WRITE.labels(backend)
    STORE_ERRORS.labels(backend, "put")
    PURGED_RESPONSES.labels(backend)
    EXPIRED_LEASES.labels(backend)


def set_replica_health(replica: str, up: bool) -> None:
    REPLICA_UP.labels(replica).set(1 if up else 0)


def set_healthy_replicas(counts: dict[str, int]) -> None:
    for model, count in counts.items():
        HEALTHY_REPLICAS.labels(model).set(count)


def exposition() -> tuple[bytes, str]:
    """The /metrics body: all workers' values in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(DEFAULT_REGISTRY), CONTENT_TYPE_LATEST


_enabled = True


def configure(enabled: bool) -> None:
    """Turn request metrics off (for measuring what they cost)."""
    global _enabled
    _enabled = enabled


def start(api: str, model: str, request_id: str, parts: int = 1) -> Tracker:
    return Tracker(api, model, request_id, parts, record=_enabled)


def touch_control_plane(head: str) -> None:
    """Export the control-plane series of cluster mode from the start."""
    CONTROLLER_UP.labels(head).set(0)
    HEAD_UP.labels(head).set(0)
    CONTROLLER_RESTARTS.labels(head)
    ADOPTED_REPLICAS.labels(head)


def set_controller_up(head: str, up: bool) -> None:
    CONTROLLER_UP.labels(head).set(1 if up else 0)


def set_head_up(head: str, up: bool) -> None:
    HEAD_UP.labels(head).set(1 if up else 0)


def set_table_age(head: str, seconds: float) -> None:
    TABLE_AGE.labels(head).set(round(seconds, 3))


def record_controller_restart(head: str, adopted: int) -> None:
    CONTROLLER_RESTARTS.labels(head).inc()
    ADOPTED_REPLICAS.labels(head).inc(adopted)
