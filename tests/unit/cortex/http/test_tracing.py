"""The HTTP request's span (cortex/http/tracing.py): a request sampled out
gets only the sampling decision, current for the app and never recorded, and
its response passes through untouched; a recorded one gets its SERVER span
with the response's status, continuing a client's W3C trace context."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.types import Message, Receive, Scope, Send

from axon import tracing
from cortex.http.tracing import TraceRequests
from tests.unit.traced import spans, traced_at

__all__ = ["spans"]

CLIENT_TRACE, CLIENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture
def sampled_out() -> Iterator[InMemorySpanExporter]:
    """Tracing on, every new trace sampled out."""
    with traced_at(0.0) as exporter:
        yield exporter


class App:
    """Answers 200 in two messages; notes the send it was given and the
    trace context current while it ran."""

    def __init__(self) -> None:
        self.send: Send | None = None
        self.metadata: dict[str, str] = {}
        self.child_made = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.send = send
        self.metadata = dict(tracing.metadata_for(None))
        with tracing.span("child") as child:
            self.child_made = child is not None
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _request(app: App, headers: list[tuple[bytes, bytes]]) -> Send:
    """One request through the middleware; the server's own send."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
    await TraceRequests(app)({**scope, "headers": headers}, receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    return send


def _sampled(value: str) -> bool:
    return bool(int(value[-2:], 16) & 1)


async def test_a_request_sampled_out_is_passed_through_untouched(
    sampled_out: InMemorySpanExporter,
) -> None:
    app = App()
    send = await _request(app, [(b"host", b"cortex")])
    assert app.send is send  # the server's own, not a wrapper around it
    # Its children are not made, and the neuron hears it is not sampled.
    assert not app.child_made
    assert not _sampled(app.metadata["traceparent"])
    assert sampled_out.get_finished_spans() == ()


async def test_a_client_trace_sampled_out_is_not_recorded_whatever_the_ratio(
    spans: InMemorySpanExporter,
) -> None:
    app = App()
    await _request(app, [(b"traceparent", f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00".encode())])
    assert not app.child_made
    assert app.metadata["traceparent"].startswith(f"00-{CLIENT_TRACE}-")
    assert spans.get_finished_spans() == ()


async def test_a_recorded_request_continues_the_client_trace(
    spans: InMemorySpanExporter,
) -> None:
    app = App()
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    await _request(app, [(b"host", b"cortex"), (b"traceparent", traceparent.encode())])
    assert app.child_made and _sampled(app.metadata["traceparent"])
    finished = {s.name: s for s in spans.get_finished_spans()}
    request = finished["POST /v1/chat/completions"]
    assert request.kind is SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == CLIENT_TRACE
    assert request.parent is not None and format(request.parent.span_id, "016x") == CLIENT_SPAN
    assert finished["child"].parent == request.context
    assert request.attributes is not None
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["http.request.method"] == "POST"
    assert request.attributes["url.path"] == "/v1/chat/completions"
