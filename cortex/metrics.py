"""Every Prometheus metric cortex exports, declared in one place: the
catalogue. What the API records (a request's life, rejections, dropped
tools, the Responses store) goes through a `Recorder` (cortex/recording.py);
the routing, admission, rate-limit and control-plane metrics through the
typed functions below.

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

import functools
import os
from collections.abc import Callable, Sequence
from typing import ParamSpec

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
from prometheus_client.exposition import choose_encoder

from axon import tracing

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
ADAPTER_ROUTED = Counter(
    "neuraxis_adapter_requests",
    "Requests for a LoRA adapter (model: the adapter's id) dispatched to a replica, by "
    "whether that replica held the adapter (hit: true) or had to load it (false).",
    ["model", "hit"],
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
SLOT_HOLDS = Counter(
    "neuraxis_admission_slot_holds",
    "Slots held for the tenant that freed them (slot_hold_ms): taken, expired, lower_class.",
    ["model", "outcome"],
)
RATE_LIMITED = Counter(
    "neuraxis_rate_limited",
    "Requests refused with 429 by a key's rate limits, by the key's tenant and the limit: "
    "requests, tokens or concurrency.",
    ["tenant", "reason"],
)
# Recorded only with metrics_tenant_label = true: a label per tenant is an
# operator's choice of cardinality (the ledger has the same figures anyway).
TENANT_TOKENS = Counter(
    "neuraxis_tenant_tokens",
    "Tokens of finished requests by tenant, model and kind: prompt, cached (prompt tokens "
    "served from the prefix cache) or output. Only with metrics_tenant_label = true.",
    ["tenant", "model", "kind"],
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
STORE_BYTES = Gauge(
    "neuraxis_store_bytes",
    "Bytes the stored responses take in the Responses store (their JSON), measured at "
    "every purge interval.",
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

# Autoscaling (cortex/cluster/autoscale.py, cortex/routing/wake.py). The
# controller's figures reach each cortex in the answer to its report: every
# instance exports the same desired count (gauge: max) and counts every
# decision (take the max over instances, not the sum).
AUTOSCALE_DESIRED = Gauge(
    "neuraxis_autoscale_desired_replicas",
    "Replicas the controller wants for each autoscaled model.",
    ["model"],
    multiprocess_mode="max",
)
AUTOSCALE_DECISIONS = Counter(
    "neuraxis_autoscale_decisions",
    "Changes of an autoscaled model's desired count, by direction (up, down) and reason "
    "(load, wake, idle, bounds).",
    ["model", "direction", "reason"],
)
WAKES = Counter(
    "neuraxis_wakes",
    "Wake-ups of a model scaled to zero that this cortex's requests started.",
    ["model"],
)
WAKE_DURATION = Histogram(
    "neuraxis_wake_duration_seconds",
    "Time from the first request for a model at zero replicas to its first ready replica.",
    ["model"],
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900),
)


_enabled = True


def configure(enabled: bool) -> None:
    """Turn request metrics off (for measuring what they cost)."""
    global _enabled
    _enabled = enabled


_P = ParamSpec("_P")


def _when_enabled(record: Callable[_P, None]) -> Callable[_P, None]:
    """`record`, done only while request metrics are on."""

    @functools.wraps(record)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> None:
        if _enabled:
            record(*args, **kwargs)

    return guarded


@_when_enabled
def record_routed(model: str, replica: str) -> None:
    """A request dispatched to a replica (each attempt counts)."""
    ROUTED.labels(model, replica).inc()


@_when_enabled
def record_decision(model: str, replica: str, policy: str, decision: str) -> None:
    """A request dispatched to a replica, with the policy's kind of decision."""
    POLICY_DECISIONS.labels(model, replica, policy, decision).inc()


@_when_enabled
def record_adapter_route(model: str, hit: bool) -> None:
    """A request for an adapter dispatched to a replica that held it, or not."""
    ADAPTER_ROUTED.labels(model, "true" if hit else "false").inc()


def touch_decisions(model: str, replica: str, policy: str, decisions: Sequence[str]) -> None:
    """Export each kind of decision `policy` makes at 0 for a replica."""
    for decision in decisions:
        POLICY_DECISIONS.labels(model, replica, policy, decision)


@_when_enabled
def record_retry(model: str, replica: str) -> None:
    """A request retried elsewhere after `replica` failed before its first token."""
    RETRIES.labels(model, replica).inc()


@_when_enabled
def record_ejection(replica: str) -> None:
    """A replica ejected by outlier ejection."""
    EJECTIONS.labels(replica).inc()


@_when_enabled
def record_retry_refused(model: str) -> None:
    """A retry the budget (or an engine's death) did not allow."""
    RETRIES_REFUSED.labels(model).inc()


@_when_enabled
def record_admission_wait(model: str, seconds: float) -> None:
    """A request admitted or refused after waiting `seconds` for a slot."""
    ADMISSION_WAIT.labels(model).observe(seconds)


@_when_enabled
def record_admission_rejected(model: str, reason: str) -> None:
    """A request refused by admission control (`reason`: queue_full, timeout)."""
    ADMISSION_REJECTIONS.labels(model, reason).inc()


@_when_enabled
def record_slot_hold(model: str, outcome: str) -> None:
    SLOT_HOLDS.labels(model, outcome).inc()


@_when_enabled
def set_admission_queue_depth(model: str, depth: int) -> None:
    ADMISSION_QUEUE_DEPTH.labels(model).set(depth)


@_when_enabled
def record_rate_limited(tenant: str, reason: str) -> None:
    """A request refused by its key's limits (tenants are the operator's
    own names, made with `neuraxis keys create`: a bounded set)."""
    RATE_LIMITED.labels(tenant, reason).inc()


@_when_enabled
def record_tenant_tokens(tenant: str, model: str, prompt: int, cached: int, output: int) -> None:
    """A finished request's tokens by its tenant (metrics_tenant_label only)."""
    for kind, count in (("prompt", prompt), ("cached", cached), ("output", output)):
        if count:
            TENANT_TOKENS.labels(tenant, model, kind).inc(count)


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
    STORE_BYTES.labels(backend)
    EXPIRED_LEASES.labels(backend)


def set_replica_health(replica: str, up: bool) -> None:
    REPLICA_UP.labels(replica).set(1 if up else 0)


def set_healthy_replicas(counts: dict[str, int]) -> None:
    for model, count in counts.items():
        HEALTHY_REPLICAS.labels(model).set(count)


def exposition(accept: str = "") -> tuple[bytes, str]:
    """The /metrics body: all workers' values in multiprocess mode. With
    tracing on, a scraper that accepts OpenMetrics gets it, with the latency
    histograms' exemplars (trace ids; one worker only: prometheus_client
    keeps none across processes); otherwise the text format as always."""
    registry = DEFAULT_REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    if tracing.enabled() and "application/openmetrics-text" in accept:
        encode, content_type = choose_encoder(accept)
        return encode(registry), content_type
    return generate_latest(registry), CONTENT_TYPE_LATEST


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


def record_wake(model: str) -> None:
    WAKES.labels(model).inc()


def record_wake_duration(model: str, seconds: float) -> None:
    WAKE_DURATION.labels(model).observe(seconds)


def set_autoscale_desired(model: str, replicas: int) -> None:
    AUTOSCALE_DESIRED.labels(model).set(replicas)


def record_autoscale_decisions(model: str, direction: str, reason: str, count: int) -> None:
    AUTOSCALE_DECISIONS.labels(model, direction, reason).inc(count)
