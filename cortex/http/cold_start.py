"""`x-neuraxis-cold-start-ms` on the answer of a request that woke a model
scaled to zero (or waited for its wake): an ASGI middleware that gives each
request a `ColdStart` holder (cortex/routing/wake.py fills it) and adds the
header when the response starts, streams included (their headers go out
after the first message, so after the wait)."""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from cortex.http.asgi import HttpMiddleware
from cortex.routing.wake import ColdStart, cold_start

HEADER = b"x-neuraxis-cold-start-ms"


class ColdStartHeader(HttpMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        holder = ColdStart()
        token = cold_start.set(holder)

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start" and holder.ms is not None:
                message["headers"] = [
                    *message.get("headers", []),
                    (HEADER, str(holder.ms).encode()),
                ]
            await send(message)

        try:
            await self.app(scope, receive, with_header)
        finally:
            cold_start.reset(token)
