"""The route class of every `/v1/...` route: what runs before FastAPI reads
the request's body.

FastAPI reads and parses a body before it solves a route's dependencies, so
with auth as a dependency a client without a key made cortex read, parse and
validate up to `max_body_bytes` on the event loop before its 401 (a keyless
16 MiB body: 401 after 1.5 s, `/healthz` stalled 1.7 s). Here the caller is
authenticated from its headers first, and a key already at its request rate
or concurrency refused, before a byte of the body is read.

`CountedRoute`, the Responses routes', also counts the requests without a
body (a GET of a stored response, its replay, input items, delete, cancel)
toward the key's rpm and max_concurrent, as a generation is counted by its
dispatch: a replay holds a slot until its stream ends.

A body larger than `PARSE_INLINE_BYTES` is then parsed and validated in a
worker thread: pydantic on 16 MiB of small messages takes over a second,
which on the loop would stall every other request and the health checks.
A refused body gets the same 400 as FastAPI's own validation would give.
"""

from __future__ import annotations

import asyncio
import email.message
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, ClassVar

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from axon import tracing
from axon.errors import InvalidRequestError
from cortex.api import body_json, dispatch, gc_paused
from cortex.api.caps import LIST_CAPS, ListCap, RequestCaps, check_lists
from cortex.api.gateway import authenticate, gateway_of
from cortex.auth.limiter import Admission
from cortex.http.context import context_of

# Below this a body is parsed on the loop: the hop to a thread and back
# costs more than parsing it.
PARSE_INLINE_BYTES = 64 * 1024

# One large body parsed at a time: parsing holds the GIL most of the time, so
# parallel parses end no sooner, and held their object graphs all at once
# (four 16 MiB bodies: RSS 690 MiB in parallel, 173 MiB one at a time).
_PARSING = asyncio.Semaphore(1)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class ApiRoute(APIRoute):
    # Whether a request without a body counts toward the key's limits.
    counts_bodyless: ClassVar[bool] = False

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        model = self._body_model()
        if model is None and self.counts_bodyless:
            handler = _counted(handler)

        async def authenticated_first(request: Request) -> Response:
            if tracing.enabled():
                await _traced_authenticate(request)
            else:
                await authenticate(request)
            if model is None:
                return await handler(request)
            parsed = _ParsedRequest(request.scope, request.receive)
            await parsed.parse(model)
            return await handler(parsed)

        return authenticated_first

    def _body_model(self) -> type[BaseModel] | None:
        """The route's one JSON body model (None: it takes no body)."""
        params = self.dependant.body_params
        if len(params) != 1:
            return None
        annotation = params[0].field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
        return None


async def _traced_authenticate(request: Request) -> None:
    with tracing.span("neuraxis.authenticate") as span:
        await authenticate(request)
        tracing.annotate(span, {"neuraxis.tenant": context_of(request).principal.tenant})


class CountedRoute(ApiRoute):
    counts_bodyless = True


def _counted(handler: Handler) -> Handler:
    """`handler`, admitted against the key's rpm and max_concurrent and
    settled when its answer (a stream's last byte included) is done."""

    async def counted(request: Request) -> Response:
        admission = await dispatch.admit_request(request)
        if admission is None:
            return await handler(request)
        try:
            response = await handler(request)
        except BaseException:
            admission.release()
            raise
        if isinstance(response, StreamingResponse):
            response.body_iterator = _released(response.body_iterator, admission)
        else:
            admission.release()
        return response

    return counted


async def _released(body: AsyncIterable[Any], admission: Admission) -> AsyncIterator[Any]:
    try:
        async for chunk in body:
            yield chunk
    finally:
        admission.release()


class _ParsedRequest(Request):
    """A request whose large JSON body was validated in a worker thread:
    `json()` gives FastAPI the model itself, which its own validation then
    passes through as is."""

    parsed: BaseModel | None = None

    async def parse(self, model: type[BaseModel]) -> None:
        body = await self.body()
        if len(body) > PARSE_INLINE_BYTES and _is_json(self.headers.get("content-type")):
            lists = LIST_CAPS.get(model, ())
            request_caps = gateway_of(self).caps
            async with _PARSING:
                self.parsed = await asyncio.to_thread(_validated, model, body, request_caps, lists)

    async def json(self) -> Any:
        if self.parsed is not None:
            return self.parsed
        return await super().json()


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads the body as JSON (its own test: none, or application/*json)."""
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def _validated(
    model: type[BaseModel], body: bytes, request_caps: RequestCaps, lists: Sequence[ListCap]
) -> BaseModel:
    """`body` as `model`, or the errors FastAPI's validation would raise
    (its lists over their caps: the 400 the route's own check gives)."""
    with gc_paused.paused():
        return _parsed(model, body, request_caps, lists)


def _parsed(
    model: type[BaseModel], body: bytes, request_caps: RequestCaps, lists: Sequence[ListCap]
) -> BaseModel:
    try:
        raw = body_json.loads(body)
    except json.JSONDecodeError as e:
        raise _json_invalid(e.pos, e.msg) from e
    except UnicodeDecodeError as e:
        raise _json_invalid(e.start, e.reason) from e
    try:
        check_lists(request_caps, lists, raw)
        return model.model_validate(raw)
    except ValidationError as e:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in e.errors()]
        body_json.release(raw)
        raise RequestValidationError(errors) from e
    except InvalidRequestError:
        body_json.release(raw)  # refused: freed here, a slice at a time
        raise


def _json_invalid(position: int, reason: str) -> RequestValidationError:
    """FastAPI's own error for a body that is not JSON."""
    error = {"type": "json_invalid", "loc": ("body", position), "msg": "JSON decode error"}
    return RequestValidationError([{**error, "input": {}, "ctx": {"error": reason}}])
