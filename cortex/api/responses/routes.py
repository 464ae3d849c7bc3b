"""The Responses API endpoints: create (streamed or not), retrieve, delete,
input_items and cancel.

A create request travels the same internal request as chat completions; the
conversation is rebuilt from the store when it continues a previous response.
A stored response is written before the client is told it is complete, so an
acknowledged response survives a crash of cortex.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from cortex import metrics
from cortex.api.disconnect import cancel_on_disconnect
from cortex.api.responses.builder import Event, ResponseBuilder
from cortex.api.responses.items import (
    Item,
    new_id,
    normalise,
    parse_items,
    request_fields,
    to_messages,
)
from cortex.routing.pool import NeuronPool
from cortex.schemas.responses import UNSUPPORTED_FIELDS, NamedFunction, ResponsesRequest
from cortex.store.base import ResponseStore, StoredResponse
from neuraxis.errors import InvalidRequestError, NeuraxisError, NotFoundError
from neuraxis.v1 import neuron_pb2 as pb

router = APIRouter()
log = logging.getLogger("neuraxis.cortex")

_MAX_CHAIN = 1000
_TOOL_MODES = {
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}
_FORMATS = {
    "text": pb.RESPONSE_FORMAT_KIND_TEXT,
    "json_object": pb.RESPONSE_FORMAT_KIND_JSON_OBJECT,
    "json_schema": pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA,
}


def _store(request: Request) -> ResponseStore:
    store: ResponseStore = request.app.state.store
    return store


def _check(body: ResponsesRequest) -> None:
    for name in UNSUPPORTED_FIELDS:
        if getattr(body, name) is not None:
            raise InvalidRequestError(f"'{name}' is not supported by this server.", param=name)
    if body.background and not body.store:
        raise InvalidRequestError(
            "Background responses must be stored ('store': true).", param="background"
        )
    if body.tool_choice is not None and not body.tools:
        raise InvalidRequestError(
            "'tool_choice' is only allowed when 'tools' are specified.", param="tool_choice"
        )
    names = {t.name for t in body.tools or []}
    if isinstance(body.tool_choice, NamedFunction) and body.tool_choice.name not in names:
        raise InvalidRequestError(
            f"tool_choice names '{body.tool_choice.name}', which is not in 'tools'.",
            param="tool_choice",
        )
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_schema" and fmt.schema_ is None:
        raise InvalidRequestError(
            "'text.format.schema' is required for json_schema.", param="text.format.schema"
        )


async def _history(store: ResponseStore, previous_id: str) -> list[Item]:
    """Earlier inputs and outputs of the chain ending at previous_id, oldest
    first. Instructions are not carried over, as in OpenAI's API."""
    chain: list[StoredResponse] = []
    next_id: str | None = previous_id
    while next_id is not None and len(chain) < _MAX_CHAIN:
        record = await store.get(next_id)
        if record is None:
            raise NotFoundError(
                f"Previous response with id '{next_id}' not found.", param="previous_response_id"
            )
        chain.append(record)
        next_id = record.previous_response_id
    items: list[Item] = []
    for record in reversed(chain):
        items += parse_items(record.input_items)
        items += parse_items(
            [o for o in record.response.get("output", []) if o.get("type") != "reasoning"]
        )
    return items


def to_generate_request(
    body: ResponsesRequest, items: list[Item], request_id: str
) -> pb.GenerateRequest:
    request = pb.GenerateRequest(
        request_id=request_id,
        model=body.model,
        messages=to_messages(body.instructions, items),
        sampling=pb.SamplingParams(
            max_tokens=body.max_output_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
        ),
        tools=[
            pb.Tool(
                name=t.name,
                description=t.description or "",
                parameters_json=json.dumps(t.parameters) if t.parameters else "",
                strict=bool(t.strict),
            )
            for t in body.tools or []
        ],
    )
    if body.parallel_tool_calls is not None:
        request.parallel_tool_calls = body.parallel_tool_calls
    request.truncate_oldest = body.truncation == "auto"
    if isinstance(body.tool_choice, NamedFunction):
        request.tool_choice.mode = pb.TOOL_CHOICE_MODE_NAMED
        request.tool_choice.name = body.tool_choice.name
    elif body.tool_choice is not None:
        request.tool_choice.mode = _TOOL_MODES[body.tool_choice]
    fmt = body.text.format if body.text else None
    if fmt is not None:
        request.response_format.kind = _FORMATS[fmt.type]
        if fmt.schema_ is not None:
            request.response_format.schema_json = json.dumps(fmt.schema_)
    return request


@router.post("/v1/responses", response_model=None)
async def create_response(
    body: ResponsesRequest, request: Request
) -> JSONResponse | StreamingResponse:
    _check(body)
    pool: NeuronPool = request.app.state.pool
    store = _store(request)
    response_id = new_id("resp")
    items = [normalise(i) for i in body.items()]
    history = await _history(store, body.previous_response_id) if body.previous_response_id else []
    internal = to_generate_request(body, history + parse_items(items), response_id)
    pool.check_task(body.model, pb.MODEL_TASK_GENERATE, "/v1/responses")
    tracker = metrics.start("responses", pool.model_label(body.model), response_id)
    request.state.tracked = True
    stream = metrics.tracked(pool.generate(internal), tracker)
    builder = ResponseBuilder(response_id, int(time.time()), request_fields(body))
    record = _Recorder(store, body, items, builder)
    headers = {"X-Request-Id": response_id}
    if body.background:
        builder.fields["background"] = True
        builder.status = "queued"
        await record.save()
        tasks: dict[str, asyncio.Task[None]] = request.app.state.background
        task = asyncio.create_task(_run_in_background(stream, builder, record))
        tasks[response_id] = task
        task.add_done_callback(lambda _: tasks.pop(response_id, None))
        return JSONResponse(builder.snapshot(), headers=headers)
    # Errors before the first token keep their HTTP status (see chat.py).
    first = await anext(stream)
    if body.stream:
        frames = _stream(first, stream, builder, record)
        return StreamingResponse(frames, media_type="text/event-stream", headers=headers)
    await cancel_on_disconnect(request, _consume(first, stream, builder))
    builder.finish()
    await record.save()
    return JSONResponse(builder.snapshot(), headers=headers)


class _Recorder:
    """Writes the response to the store when the request asked for it."""

    def __init__(
        self, store: ResponseStore, body: ResponsesRequest, items: list[dict[str, Any]],
        builder: ResponseBuilder,
    ) -> None:  # fmt: skip
        self._store, self._body, self._items, self._builder = store, body, items, builder

    async def save(self) -> None:
        if not self._body.store:
            return
        started = time.perf_counter()
        await self._store.put(
            StoredResponse(
                id=self._builder.response_id,
                created_at=self._builder.created_at,
                previous_response_id=self._body.previous_response_id,
                response=self._builder.snapshot(),
                input_items=self._items,
            )
        )
        backend = self._store.backend
        metrics.STORE_WRITE.labels(backend).observe(time.perf_counter() - started)
        metrics.STORED_RESPONSES.labels(backend).inc()


async def _run_in_background(
    stream: AsyncIterator[pb.GenerateResponse], builder: ResponseBuilder, record: _Recorder
) -> None:
    """A background response: generate, then store the outcome, whatever it is."""
    try:
        builder.status = "in_progress"
        await record.save()
        async for message in stream:
            builder.feed(message)
        builder.finish()
    except asyncio.CancelledError:
        builder.cancel()
        await asyncio.shield(record.save())
        raise
    except NeuraxisError as e:
        builder.fail("server_error", e.message)
    except Exception:
        log.exception("background response %s failed", builder.response_id)
        builder.fail("server_error", "The server had an error while processing your request.")
    await record.save()


async def _consume(
    first: pb.GenerateResponse, rest: AsyncIterator[pb.GenerateResponse], builder: ResponseBuilder
) -> None:
    builder.feed(first)
    async for message in rest:
        builder.feed(message)


async def _stream(
    first: pb.GenerateResponse,
    rest: AsyncIterator[pb.GenerateResponse],
    builder: ResponseBuilder,
    record: _Recorder,
) -> AsyncIterator[bytes]:
    sequence = 0

    def frame(event: Event) -> bytes:
        nonlocal sequence
        kind, payload = event
        data = json.dumps({"type": kind, "sequence_number": sequence, **payload})
        sequence += 1
        return f"event: {kind}\ndata: {data}\n\n".encode()

    for event in builder.start():
        yield frame(event)
    try:
        for event in builder.feed(first):
            yield frame(event)
        async for message in rest:
            for event in builder.feed(message):
                yield frame(event)
        terminal = builder.finish()
        await record.save()
        yield frame(terminal)
    except NeuraxisError as e:
        for event in builder.fail("server_error", e.message):
            if event[0] == "response.failed":
                await record.save()
            yield frame(event)
    except Exception:
        for event in builder.fail(
            "server_error", "The server had an error while processing your request."
        ):
            if event[0] == "response.failed":
                await record.save()
            yield frame(event)


async def _stored(request: Request, response_id: str) -> StoredResponse:
    record = await _store(request).get(response_id)
    if record is None:
        raise NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")
    return record


@router.get("/v1/responses/{response_id}")
async def retrieve_response(response_id: str, request: Request) -> JSONResponse:
    return JSONResponse((await _stored(request, response_id)).response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> JSONResponse:
    if not await _store(request).delete(response_id):
        raise NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> JSONResponse:
    items = list((await _stored(request, response_id)).input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [i["id"] for i in items]
        if after not in ids:
            raise InvalidRequestError(f"No input item with id '{after}'.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> JSONResponse:
    record = await _stored(request, response_id)
    if not record.response.get("background"):
        raise InvalidRequestError(
            "Only responses created with 'background': true can be cancelled.",
            param="response_id",
        )
    task = request.app.state.background.get(response_id)
    if task is not None:
        task.cancel()  # aborts the generation in the neuron
        await asyncio.gather(task, return_exceptions=True)
        record = await _stored(request, response_id)
    elif record.response["status"] in ("queued", "in_progress"):
        raise InvalidRequestError(
            "This response is running on another cortex instance; cancel it there.",
            param="response_id",
        )
    return JSONResponse(record.response)
