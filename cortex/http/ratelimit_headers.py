"""The x-ratelimit-* headers on every response of a rate-limited key: an
ASGI middleware that adds them when the response starts (streams too).

A request that reserved something carries the headers of its admission
(the request context's `admission`, set by dispatch); any other response of a
limited key (a 429, a GET of a stored response, /v1/models) reads where the
key stands from the store.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cortex.auth.limiter import Limiter
from cortex.http.asgi import HttpMiddleware
from cortex.http.context import RequestContext, context_in


class RateLimitHeaders(HttpMiddleware):
    def __init__(self, app: ASGIApp, limiter: Limiter) -> None:
        super().__init__(app)
        self.limiter = limiter

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = await self._headers(context_in(scope))
                if extra:
                    message["headers"] = [
                        *message.get("headers", []),
                        *((k.encode(), v.encode()) for k, v in extra.items()),
                    ]
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _headers(self, context: RequestContext) -> dict[str, str]:
        principal = context.principal
        if not self.limiter.applies(principal):
            return {}
        if context.admission is not None:
            return context.admission.headers
        return await self.limiter.headers(principal)
