"""The HTTP request's span: the root of cortex's part of a trace, or the
child of the client's W3C `traceparent`. An ASGI middleware, mounted only
when tracing is on (cortex/app.py), so that with tracing off no request
pays for it.

The span is current for everything the request's handler does, streams
included (their tasks copy the context), so that authentication, admission,
routing and the attempts (cortex/api/route.py, cortex/routing/attempts.py)
become its children and log lines carry its trace id. Health checks, the
OpenAPI schema and /metrics are not traced: only the API's paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Message, Receive, Scope, Send

from axon import tracing
from cortex.http.asgi import HttpMiddleware
from cortex.http.context import context_in

if TYPE_CHECKING:
    from opentelemetry.trace import Span

# The paths outside /v1 that are API calls.
_API_PATHS = frozenset({"/tokenize", "/detokenize"})
# A surface's GenAI operation (OpenTelemetry's gen_ai.operation.name values).
_OPERATIONS = {"completions": "text_completion", "embeddings": "embeddings"}


def traced(path: str) -> bool:
    return path.startswith("/v1/") or path in _API_PATHS


class TraceRequests(HttpMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if not traced(path):
            await self.app(scope, receive, send)
            return
        method: str = scope.get("method", "")
        carrier = tracing.carrier_of_headers(scope.get("headers", ()))
        span = tracing.server_span(f"{method} {path}", carrier)
        if not span.is_recording():
            # Sampled out (99 requests of 100 at ratio 0.01): the span is
            # only the decision that the request's own spans and its neuron
            # read, so it is made current and the response passes untouched:
            # no wrapper around each message, nothing noted at the end.
            token = tracing.attach(span)
            try:
                await self.app(scope, receive, send)
            finally:
                tracing.detach(token)
            return
        await self._recorded(span, scope, receive, send)

    async def _recorded(self, span: Span, scope: Scope, receive: Receive, send: Send) -> None:
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        from opentelemetry.trace import Status, StatusCode, use_span

        span.set_attributes(
            {"http.request.method": scope.get("method", ""), "url.path": scope.get("path", "")}
        )
        with use_span(span, end_on_exit=True, record_exception=True):
            try:
                await self.app(scope, receive, sending)
            finally:
                context = context_in(scope)
                span.set_attribute("http.response.status_code", status)
                if context.request_id is not None:
                    span.set_attribute("neuraxis.request_id", context.request_id)
                if context.surface is not None:
                    api = context.surface.name
                    span.set_attribute("neuraxis.api", api)
                    span.set_attribute("gen_ai.operation.name", _OPERATIONS.get(api, "chat"))
                span.set_attribute("neuraxis.tenant", context.principal.tenant)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
