"""Where the API records what happens: the `Recorder` the request lifecycle
(cortex/api/lifecycle.py), the error handlers, the tool catalogue and the
Responses runs and upkeep are given, with the Prometheus recorder over the
catalogue of cortex/metrics.py and the one that records nothing, used with
`--no-metrics` (for measuring what recording costs). One choice, made once
when the app is built, instead of a check of a flag at every record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from axon import tracing
from cortex import metrics

Observe = Callable[[float], None]


@dataclass(frozen=True)
class Ended:
    """How a dispatched request ended."""

    api: str
    model: str
    outcome: str  # success, client_error, server_error or cancelled
    seconds: float
    prompt_tokens: int
    output_tokens: int
    had_output: bool  # it left the queue of those waiting for a first output


class Recorder(Protocol):
    def started(self, api: str, model: str) -> None:
        """A request dispatched, waiting for its first output."""

    def first_output(self, api: str, model: str, seconds: float) -> None: ...

    def inter_token(self, api: str, model: str) -> Observe:
        """What observes the gaps between one request's outputs, looked up
        once per request: it runs for every token."""

    def finished(self, end: Ended) -> None:
        """A dispatched request ended."""

    def rejected(self, api: str, model: str, outcome: str) -> None:
        """A request that failed before it was dispatched."""

    def dropped_tool(self, api: str, kind: str) -> None:
        """A hosted tool left out of a request (`kind`: its tool type, a closed set)."""

    def store_write(self, backend: str, seconds: float) -> None:
        """A response written to the Responses store."""

    def store_error(self, backend: str, op: str) -> None:
        """A store operation that failed (op: put, renew, expire, purge, claim)."""

    def purged(self, backend: str, count: int) -> None:
        """Stored responses past their retention, deleted."""

    def store_size(self, backend: str, size: int) -> None:
        """The bytes the store's responses take, as last measured."""

    def lease_expired(self, backend: str) -> None:
        """A running response failed because its lease expired."""


class PrometheusRecorder:
    def started(self, api: str, model: str) -> None:
        metrics.IN_FLIGHT.labels(model).inc()
        metrics.QUEUED.labels(model).inc()

    def first_output(self, api: str, model: str, seconds: float) -> None:
        metrics.TIME_TO_FIRST_TOKEN.labels(api, model).observe(seconds, _exemplar())
        metrics.QUEUED.labels(model).dec()

    def inter_token(self, api: str, model: str) -> Observe:
        # The child, not a labels() lookup (a lock and a dict) per token:
        # that made each token cost 1.3 us instead of 0.6 us.
        return metrics.INTER_TOKEN_LATENCY.labels(api, model).observe

    def finished(self, end: Ended) -> None:
        api, model = end.api, end.model
        if not end.had_output:
            metrics.QUEUED.labels(model).dec()
        metrics.IN_FLIGHT.labels(model).dec()
        metrics.REQUESTS.labels(api, model, end.outcome).inc()
        metrics.REQUEST_DURATION.labels(api, model).observe(end.seconds, _exemplar())
        if end.prompt_tokens:
            metrics.PROMPT_TOKENS.labels(api, model).inc(end.prompt_tokens)
        if end.output_tokens:
            metrics.OUTPUT_TOKENS.labels(api, model).inc(end.output_tokens)

    def rejected(self, api: str, model: str, outcome: str) -> None:
        metrics.REQUESTS.labels(api, model, outcome).inc()

    def dropped_tool(self, api: str, kind: str) -> None:
        metrics.DROPPED_TOOLS.labels(api, kind).inc()

    def store_write(self, backend: str, seconds: float) -> None:
        metrics.STORE_WRITE.labels(backend).observe(seconds)
        metrics.STORED_RESPONSES.labels(backend).inc()

    def store_error(self, backend: str, op: str) -> None:
        metrics.STORE_ERRORS.labels(backend, op).inc()

    def purged(self, backend: str, count: int) -> None:
        metrics.PURGED_RESPONSES.labels(backend).inc(count)

    def store_size(self, backend: str, size: int) -> None:
        metrics.STORE_BYTES.labels(backend).set(size)

    def lease_expired(self, backend: str) -> None:
        metrics.EXPIRED_LEASES.labels(backend).inc()


def _exemplar() -> dict[str, str] | None:
    """The request's trace id, as an exemplar of the latency it adds to a
    histogram (None: tracing off, or the request is not sampled). Not for
    the gaps between tokens: one look-up per token is too many."""
    trace_id = tracing.current_trace_id()
    return {"trace_id": trace_id} if trace_id is not None else None


def _ignore(seconds: float) -> None:
    pass


class NoRecorder:
    """Records nothing."""

    def started(self, api: str, model: str) -> None: ...

    def first_output(self, api: str, model: str, seconds: float) -> None: ...

    def inter_token(self, api: str, model: str) -> Observe:
        return _ignore

    def finished(self, end: Ended) -> None: ...

    def rejected(self, api: str, model: str, outcome: str) -> None: ...

    def dropped_tool(self, api: str, kind: str) -> None: ...

    def store_write(self, backend: str, seconds: float) -> None: ...

    def store_error(self, backend: str, op: str) -> None: ...

    def purged(self, backend: str, count: int) -> None: ...

    def store_size(self, backend: str, size: int) -> None: ...

    def lease_expired(self, backend: str) -> None: ...


def recorder_for(enabled: bool) -> Recorder:
    return PrometheusRecorder() if enabled else NoRecorder()
