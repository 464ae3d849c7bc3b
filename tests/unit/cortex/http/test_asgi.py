"""The edge's middlewares act on HTTP requests only: a lifespan scope goes
to the app untouched."""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from cortex.http.asgi import HttpMiddleware


class Marks(HttpMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app({**scope, "marked": True}, receive, send)


async def _call(scope: Scope) -> list[Scope]:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)

    async def receive() -> Message:
        raise AssertionError("not read")

    async def send(message: Message) -> None:
        raise AssertionError("not sent")

    await Marks(app)(scope, receive, send)
    return seen


async def test_an_http_request_goes_through_the_middleware() -> None:
    assert await _call({"type": "http"}) == [{"type": "http", "marked": True}]


async def test_the_lifespan_passes_through_untouched() -> None:
    assert await _call({"type": "lifespan"}) == [{"type": "lifespan"}]
