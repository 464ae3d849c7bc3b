"""OpenTelemetry traces, shared by cortex and the neuron: the settings both
services have (`TraceSettings`, a mixin as `LogSettings` is), the tracer
provider with its OTLP exporter, and the few helpers the request paths call.

Off by default and free when off: nothing here imports OpenTelemetry until
`configure` is given an endpoint, `tracer()` is then None, and every helper
returns at once (a module global read) without making an SDK object. The
callers guard their own span code with `enabled()` where building the
attributes would cost something.

What is not here: which spans each side makes (cortex/http/tracing.py,
cortex's route and attempts, neuron/tracing.py) and the metric exemplars
(cortex/recording.py asks `current_trace_id`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field
from pydantic_settings import BaseSettings

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span as Span
    from opentelemetry.trace import Tracer
    from opentelemetry.util.types import AttributeValue

    Attributes = Mapping[str, AttributeValue]
else:
    Attributes = Mapping

OtlpProtocol = Literal["grpc", "http/protobuf"]
# gRPC metadata keys are lower case; W3C's header names are too.
TRACEPARENT = "traceparent"
# The W3C trace context: all a carrier (headers, metadata) holds that we read.
_CONTEXT_KEYS = frozenset({TRACEPARENT, "tracestate"})
_CONTEXT_HEADERS = frozenset(key.encode() for key in _CONTEXT_KEYS)

log = logging.getLogger("neuraxis.tracing")


class TraceSettings(BaseSettings):
    """The tracing settings cortex and the neuron both have (plain fields:
    `otlp_endpoint` is the name vLLM's own option and `neuraxis up
    --otlp-endpoint` use)."""

    otlp_endpoint: str | None = Field(
        None,
        description="send OpenTelemetry traces to this OTLP collector, e.g. "
        "http://127.0.0.1:4317 (gRPC) or http://127.0.0.1:4318 (http/protobuf; /v1/traces "
        "is added when the URL has no path); unset: no tracing, and no cost",
    )
    otlp_protocol: OtlpProtocol = Field(
        "grpc", description="the OTLP exporter's protocol: grpc or http/protobuf"
    )
    trace_sample_ratio: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="share of traces started here that are recorded (a client's sampled "
        "traceparent is always followed)",
    )


_tracer: Tracer | None = None
_provider: TracerProvider | None = None
# opentelemetry.trace and .propagate once tracing is on (looked up once, not
# imported at each call).
_api: Any = None
_propagate: Any = None
_context: Any = None
# True while a request sampled out is served (`attach`): its spans and trace
# id are known to be none without asking OpenTelemetry's context, which
# costs a few calls and an ABC instance check a time.
_SAMPLED_OUT: ContextVar[bool] = ContextVar("neuraxis_sampled_out", default=False)


def enabled() -> bool:
    return _tracer is not None


def tracer() -> Tracer | None:
    """The process's tracer, or None: tracing is off."""
    return _tracer


def configure(service: str, settings: TraceSettings) -> bool:
    """Trace as `service` (`neuraxis-cortex`, `neuraxis-neuron`), exporting
    to the configured collector in batches; False, and nothing imported,
    when no endpoint is set."""
    if not settings.otlp_endpoint:
        return False
    if _tracer is not None:
        return True  # one provider a process (the app may be built again)
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = _exporter(settings.otlp_endpoint, settings.otlp_protocol)
    install(service, settings.trace_sample_ratio, BatchSpanProcessor(exporter))
    log.info(
        "tracing to %s (%s, sample ratio %g) as %s",
        settings.otlp_endpoint,
        settings.otlp_protocol,
        settings.trace_sample_ratio,
        service,
    )
    return True


def install(service: str, sample_ratio: float, processor: SpanProcessor) -> None:
    """Trace through `processor` (tests hand an in-memory one). The provider
    stays ours, not OpenTelemetry's global one: vLLM, in the neuron's
    process, sets that to its own."""
    global _tracer, _provider, _api, _propagate, _context
    from opentelemetry import context, propagate, trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    _provider.add_span_processor(processor)
    # W3C trace context only: what clients, vLLM and the neuron speak.
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    _api, _propagate, _context = trace, propagate, context
    _tracer = _provider.get_tracer("neuraxis")
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, TraceIdFilter) for f in handler.filters):
            handler.addFilter(TraceIdFilter())


def _exporter(endpoint: str, protocol: OtlpProtocol) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        # An http:// URL is a plaintext channel, as vLLM's option reads it.
        return OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(endpoint=http_traces_url(endpoint))


def http_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: a collector's base URL gets /v1/traces."""
    if urlsplit(endpoint).path.strip("/"):
        return endpoint
    return endpoint.rstrip("/") + "/v1/traces"


def shutdown() -> None:
    """Export what is batched (a stopping service's last spans); tracing is
    off from then on."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def current_trace_id() -> str | None:
    """The current span's trace id in hex, when one is being recorded."""
    if _tracer is None or _SAMPLED_OUT.get():
        return None
    context = _api.get_current_span().get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return None
    return format(context.trace_id, "032x")


def extract(carrier: Mapping[str, str]) -> Context | None:
    """The trace context a client or cortex sent (None: tracing off)."""
    if _tracer is None:
        return None
    context: Context = _propagate.extract(carrier)
    return context


def carrier_of_headers(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The W3C trace context among an ASGI request's headers (empty: none);
    the other headers are not decoded."""
    return {k.decode(): v.decode("latin-1") for k, v in headers if k in _CONTEXT_HEADERS}


def carrier_of_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> dict[str, str]:
    """The W3C trace context in a gRPC call's metadata (empty: none)."""
    return {k: str(v) for k, v in metadata if k in _CONTEXT_KEYS}


def sampled_out(carrier: Mapping[str, str]) -> bool:
    """Whether the caller's `traceparent` says its trace is not recorded:
    the parent-based sampler then records nothing here either, so the
    callee can skip its spans without asking it. Read from the header's
    flags (W3C: `00-<trace id>-<span id>-<flags>`, bit 0 sampled); a
    malformed one is left to the SDK."""
    value = carrier.get(TRACEPARENT)
    if value is None or len(value) != 55 or value[52] != "-":
        return False
    try:
        return not int(value[53:], 16) & 1
    except ValueError:
        return False


def server_span(name: str, carrier: Mapping[str, str]) -> Span:
    """A SERVER span continuing the trace context in `carrier` (empty: a new
    trace, sampled at the ratio), neither current nor ended yet. A trace
    sampled out gets a non-recording span: only the decision, which the
    request's children and callees read once it is current (`attach`)."""
    assert _tracer is not None, "tracing is off"
    parent = _propagate.extract(carrier) if carrier else None
    span: Span = _tracer.start_span(name, context=parent, kind=_api.SpanKind.SERVER)
    return span


Attached = tuple[object, Token[bool]]


def attach(span: Span) -> Attached:
    """Make `span` current until `detach` with what this returns: what
    `span()` does, without its context managers (the path of a request
    sampled out). Within, nothing more is recorded: the spans made and
    the trace ids read are those of `span`'s trace."""
    return _context.attach(_api.set_span_in_context(span)), _SAMPLED_OUT.set(
        not span.is_recording()
    )


def detach(attached: Attached) -> None:
    token, sampled_out = attached
    _SAMPLED_OUT.reset(sampled_out)
    _context.detach(token)


def metadata_for(span: Span | None) -> tuple[tuple[str, str], ...]:
    """gRPC metadata carrying `span` as the parent of the callee's spans;
    without one, the current trace's (a trace sampled out says so to the
    callee, which then records nothing either)."""
    if _tracer is None:
        return ()
    if span is None:
        span = _api.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return ()
    # W3C trace context, written here as the propagator would (the one we
    # install speaks nothing else), without its context round trip: every
    # attempt sends it, sampled or not.
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    if not context.trace_state:
        return ((TRACEPARENT, traceparent),)
    return (TRACEPARENT, traceparent), ("tracestate", context.trace_state.to_header())


def _sampled_out() -> bool:
    """Whether the current trace was sampled out: its spans would record
    nothing, so none is made (a sampled-out request costs a span, not six)."""
    if _SAMPLED_OUT.get():
        return True
    current = _api.get_current_span()
    return bool(current.get_span_context().is_valid and not current.is_recording())


def start(
    name: str, attributes: Attributes | None = None, parent: Context | None = None
) -> Span | None:
    """A span that the caller ends (`end`), not made current: one that
    outlives the code that started it (an attempt across a stream's yields)."""
    if _tracer is None or (parent is None and _sampled_out()):
        return None
    return _tracer.start_span(name, context=parent, attributes=attributes)


def end(span: Span | None, error: BaseException | None = None) -> None:
    if span is None:
        return
    if error is not None:
        _failed(span, error)
    span.end()


def annotate(span: Span | None, attributes: Attributes) -> None:
    if span is not None:
        span.set_attributes(attributes)


# What `span` gives when tracing is off: one reusable object, nothing made.
_OFF: contextlib.nullcontext[None] = contextlib.nullcontext(None)


def span(
    name: str, attributes: Attributes | None = None, parent: Context | None = None
) -> contextlib.AbstractContextManager[Span | None]:
    """A span around a block, current within it (its awaits included: never
    across a generator's yield); None, and nothing made, when tracing is off
    or the trace was sampled out."""
    if _tracer is None or (parent is None and _sampled_out()):
        return _OFF
    return _current(_tracer, name, attributes, parent)


@contextlib.contextmanager
def _current(
    tracer: Tracer, name: str, attributes: Attributes | None, parent: Context | None
) -> Iterator[Span]:
    with tracer.start_as_current_span(
        name, context=parent, attributes=attributes, record_exception=False
    ) as current:
        try:
            yield current
        except BaseException as e:
            _failed(current, e)
            raise


def _failed(span: Span, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


class TraceIdFilter(logging.Filter):
    """Puts `trace_id` beside a line's `request_id` when a recorded span is
    current (installed only when tracing is on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "trace_id" not in vars(record):
            trace_id = current_trace_id()
            if trace_id is not None:
                record.trace_id = trace_id
        return True
