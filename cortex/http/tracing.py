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

from starlette.types import Message, Receive, Scope, Send

from axon import tracing
from cortex.http.asgi import HttpMiddleware
from cortex.http.context import context_in

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
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        method: str = scope.get("method", "")
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        from opentelemetry.trace import SpanKind

        tracer = tracing.tracer()
        assert tracer is not None, "TraceRequests is mounted only with tracing on"
        with tracer.start_as_current_span(
            f"{method} {path}",
            context=tracing.extract(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        ) as span:
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
                    from opentelemetry.trace import Status, StatusCode

                    span.set_status(Status(StatusCode.ERROR))
