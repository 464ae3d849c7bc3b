"""The neuron's spans of one Generate call (and the one span of an Embed,
Tokenize or Detokenize call), children of the attempt span cortex sent in
the call's `traceparent` metadata:

    neuron.generate            the call (SERVER), from its start to its end
      neuron.prepare           render the chat template, tokenise, truncate
      neuron.queue             submitted to the engine until its first token
                               (the engine's queue and the prefill)
      neuron.decode            first token to finish (gen_ai.* usage, finish)

The servicer opens the call (`call`) and marks its first output and its end;
the engines mark their own phases (`phase`, `submitted`), which they reach
through a context variable: a gRPC call runs in a task of its own, so each
call sees its own. With tracing off (axon/tracing.py) `call` makes nothing
and the marks return at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING

from axon import tracing
from axon.v1 import neuron_pb2 as pb

if TYPE_CHECKING:
    from opentelemetry.trace import Span

_CALL: ContextVar[CallTrace | None] = ContextVar("neuraxis_neuron_call", default=None)


class CallTrace:
    """The spans of one Generate call."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self._queue: Span | None = None
        self._decode: Span | None = None
        self._finished = False

    @property
    def trace_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    def _child(self, name: str) -> Span:
        from opentelemetry import trace

        tracer = tracing.tracer()
        assert tracer is not None
        return tracer.start_span(name, context=trace.set_span_in_context(self.span))

    def submitted(self) -> None:
        if self._queue is None:
            self._queue = self._child("neuron.queue")

    def first_output(self) -> None:
        if self._decode is not None:
            return
        if self._queue is not None:
            self._queue.end()
        self.span.add_event("first_token")
        self._decode = self._child("neuron.decode")

    def finished(self, attributes: tracing.Attributes) -> None:
        self._finished = True
        self.span.add_event("finish")
        self.span.set_attributes(attributes)
        if self._decode is not None:
            self._decode.set_attributes(attributes)

    def end(self, error: BaseException | None) -> None:
        if isinstance(error, GeneratorExit) and self._finished:
            error = None  # its caller left after the last output: nothing failed
        for child in (self._queue, self._decode):
            if child is not None and child.is_recording():
                child.end()
        tracing.end(self.span, error)


# What a call is traced with when tracing is off: nothing made.
_UNTRACED: contextlib.nullcontext[None] = contextlib.nullcontext(None)


Traced = pb.GenerateRequest | pb.EmbedRequest | pb.TokenizeRequest | pb.DetokenizeRequest


def traced(
    method: str, metadata: Iterable[tuple[str, str | bytes]], request: Traced
) -> contextlib.AbstractContextManager[CallTrace | None]:
    """`call` for a gRPC call of `method` (Generate, Embed, Tokenize,
    Detokenize), continuing the trace of the cortex attempt that sent it in
    its metadata (a call's invocation metadata, or a session start's);
    nothing made when tracing is off or that trace is not recorded."""
    if not tracing.enabled():
        return _UNTRACED
    carrier = tracing.carrier_of_metadata(metadata)
    if tracing.sampled_out(carrier):
        # cortex sampled the trace out (99 calls of 100 at ratio 0.01): the
        # parent-based sampler would record nothing, so nothing is made.
        return _UNTRACED
    return call(method, carrier, _attributes(request))


def _attributes(request: Traced) -> tracing.Attributes:
    attributes: dict[str, str | int] = {
        "neuraxis.request_id": request.request_id,
        "gen_ai.request.model": request.model,
    }
    if isinstance(request, pb.EmbedRequest):
        attributes["gen_ai.operation.name"] = "embeddings"
    elif isinstance(request, pb.GenerateRequest):
        attributes["gen_ai.operation.name"] = "chat" if request.messages else "text_completion"
        if request.sampling.HasField("max_tokens"):
            attributes["gen_ai.request.max_tokens"] = request.sampling.max_tokens
    return attributes


@contextlib.contextmanager
def call(
    method: str, metadata: Mapping[str, str], attributes: tracing.Attributes
) -> Iterator[CallTrace | None]:
    """The call's span, continuing cortex's trace (None: tracing off)."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    span = tracer.start_span(
        f"neuron.{method.lower()}",
        context=tracing.extract(metadata),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )
    if not span.is_recording():  # sampled out (by cortex): nothing more to make
        yield None
        return
    trace = CallTrace(span)
    token = _CALL.set(trace)
    error: BaseException | None = None
    try:
        yield trace
    except BaseException as e:
        error = e
        raise
    finally:
        trace.end(error)
        # A Generate its caller abandoned at a yield (gRPC cancels the call's
        # task, not its generator) is closed by asyncio's finalizer in a task
        # of its own, whose context is not the one the token was made in:
        # there the variable is that task's copy, nothing of this call's.
        with contextlib.suppress(ValueError):
            _CALL.reset(token)


def phase(name: str) -> contextlib.AbstractContextManager[object]:
    """A span of the current call around a block (`prepare`): never across a
    yield of the engine's generator."""
    trace = _CALL.get()
    if trace is None:
        return contextlib.nullcontext()
    return _phase(trace, name)


@contextlib.contextmanager
def _phase(trace: CallTrace, name: str) -> Iterator[object]:
    span = trace._child(f"neuron.{name}")
    error: BaseException | None = None
    try:
        yield span
    except BaseException as e:
        error = e
        raise
    finally:
        tracing.end(span, error)


def submitted() -> None:
    """The engine has taken the request: its queue span starts."""
    trace = _CALL.get()
    if trace is not None:
        trace.submitted()


def trace_headers() -> dict[str, str] | None:
    """The current call's span as W3C headers, for an engine that traces
    itself (vLLM's `trace_headers`); None when not tracing."""
    trace = _CALL.get()
    if trace is None:
        return None
    return dict(tracing.metadata_for(trace.span))
