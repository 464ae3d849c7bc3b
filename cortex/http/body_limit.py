"""ASGI middleware that guards the edge.

BodyLimit counts the bytes of a request body as they arrive, so that a
chunked upload with no Content-Length cannot grow past the limit either.
Once the limit is passed, whatever the app answers is replaced by a 413."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from axon.errors import RequestTooLargeError, mapping_for
from cortex.http.asgi import HttpMiddleware
from cortex.http.errors import error_envelope


class BodyLimit(HttpMiddleware):
    def __init__(
        self, app: ASGIApp, max_bytes: int, paths: Mapping[str, int] | None = None
    ) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes
        # Paths with a limit of their own (an upload to /v1/files).
        self.paths = dict(paths or {})

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.paths.get(scope["path"], self.max_bytes)
        received = 0
        too_large = False
        answered = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    too_large = True
                    raise _TooLargeError()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal answered
            if not too_large:
                await send(message)
            elif message["type"] == "http.response.start" and not answered:
                answered = True
                await self._send_413(send, limit)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _TooLargeError:
            if not answered:
                await self._send_413(send, limit)

    async def _send_413(self, send: Send, limit: int) -> None:
        error = RequestTooLargeError(f"The request body is larger than the limit of {limit} bytes.")
        payload = error_envelope(error).model_dump_json().encode()
        await send(
            {
                "type": "http.response.start",
                "status": mapping_for(error).http_status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


class _TooLargeError(Exception):
    pass
