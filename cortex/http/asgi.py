"""The shape the edge's ASGI middlewares share: they act on HTTP requests
only; the lifespan (and anything else) passes through untouched."""

from __future__ import annotations

import abc

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware(abc.ABC):
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    @abc.abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One HTTP request, passed on to `self.app` as the middleware sees fit."""
