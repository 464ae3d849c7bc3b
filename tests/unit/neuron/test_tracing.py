"""The neuron's spans of a call (neuron/tracing.py): a call whose cortex
trace was sampled out makes nothing, not even the call's span; a recorded
one continues the attempt's span and covers the engine's phases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from axon.v1 import neuron_pb2 as pb
from neuron import tracing
from tests.unit.traced import spans

__all__ = ["spans"]

TRACE, ATTEMPT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


class Context:
    """The part of a gRPC servicer context the tracing reads."""

    def __init__(self, flags: str) -> None:
        self.metadata = (
            ("user-agent", "grpc-python"),
            ("traceparent", f"00-{TRACE}-{ATTEMPT}-{flags}"),
        )

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


def _generate(flags: str) -> Any:
    context = cast("grpc.aio.ServicerContext[Any, Any]", Context(flags))
    request = pb.GenerateRequest(request_id="chat-1", model="m", prompt="hi")
    with tracing.traced("Generate", context.invocation_metadata(), request) as trace:
        with tracing.phase("prepare"):
            pass
        tracing.submitted()
        if trace is not None:
            trace.first_output()
            trace.finished({"gen_ai.usage.output_tokens": 1})
        return trace


def test_a_call_of_a_trace_sampled_out_makes_nothing(spans: InMemorySpanExporter) -> None:
    assert _generate("00") is None
    assert tracing.trace_headers() is None
    assert spans.get_finished_spans() == ()


def test_a_recorded_call_continues_the_attempt_span(spans: InMemorySpanExporter) -> None:
    trace = _generate("01")
    assert trace is not None and trace.trace_id == TRACE
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert set(finished) == {"neuron.generate", "neuron.prepare", "neuron.queue", "neuron.decode"}
    call = finished["neuron.generate"]
    assert call.parent is not None and format(call.parent.span_id, "016x") == ATTEMPT
    assert all(finished[n].parent == call.context for n in finished if n != "neuron.generate")
    assert call.attributes is not None and call.attributes["neuraxis.request_id"] == "chat-1"


@pytest.mark.parametrize("finished", [True, False], ids=["after-the-end", "midway"])
async def test_a_call_closed_from_another_task_still_ends_its_spans(
    spans: InMemorySpanExporter, finished: bool
) -> None:
    """A Generate its caller abandoned at a yield is closed by asyncio's
    finalizer in a task of its own, another context than the one the call
    started in: its spans end all the same, failed only when the caller
    left before the last output."""

    async def stream() -> AsyncIterator[int]:
        with tracing.traced("Generate", Context("01").metadata, pb.GenerateRequest()) as trace:
            assert trace is not None
            trace.first_output()
            if finished:
                trace.finished({"gen_ai.usage.output_tokens": 1})
            yield 1

    outputs = stream()
    assert isinstance(outputs, AsyncGenerator)
    assert await asyncio.create_task(outputs.__anext__()) == 1  # what the call's task did
    await asyncio.create_task(outputs.aclose())  # what the finalizer does
    ended = {s.name: s for s in spans.get_finished_spans()}
    assert set(ended) == {"neuron.generate", "neuron.decode"}
    attributes = ended["neuron.generate"].attributes or {}
    assert attributes.get("error.type") == (None if finished else "GeneratorExit")
