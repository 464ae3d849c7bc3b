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
from dataclasses import replace
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from cortex import metrics
from cortex.api import generation
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
from cortex.schemas.responses import (
    UNSUPPORTED_FIELDS,
    FunctionCallItem,
    FunctionCallOutputItem,
    NamedFunction,
    ResponsesRequest,
)
from cortex.store.base import ResponseStore, StoredResponse
from neuraxis.core.errors import InvalidRequestError, NeuraxisError, NotFoundError
from neuraxis.core.v1 import neuron_pb2 as pb

router = APIRouter()
log = logging.getLogger("neuraxis.cortex")

_MAX_CHAIN = 1000


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


def _check_call_outputs(conversation: list[Item]) -> None:
    """Every function_call_output must answer a call made earlier in the
    conversation (this request's input or the stored chain)."""
    calls: set[str] = set()
    for item in conversation:
        if isinstance(item, FunctionCallItem):
            calls.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem) and item.call_id not in calls:
            raise InvalidRequestError(
                f"No tool call found for function call output with call_id '{item.call_id}'.",
                param="input",
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
            generation.tool(t.name, t.description, t.parameters, t.strict) for t in body.tools or []
        ],
    )
    request.truncate_oldest = body.truncation == "auto"
    choice = body.tool_choice
    named = choice.name if isinstance(choice, NamedFunction) else None
    mode = None if isinstance(choice, NamedFunction) else choice
    generation.set_tool_choice(request, mode, named, body.parallel_tool_calls)
    fmt = body.text.format if body.text else None
    if fmt is not None:
        generation.set_format(request, fmt.type, fmt.schema_)
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
    conversation = history + parse_items(items)
    _check_call_outputs(conversation)
    internal = to_generate_request(body, conversation, response_id)
    pool.check_task(body.model, pb.MODEL_TASK_GENERATE, "/v1/responses")
    (stream,) = generation.dispatch(request, "responses", body.model, response_id, [internal])
    builder = ResponseBuilder(response_id, int(time.time()), request_fields(body))
    run = _Run(store, body, items, builder, request.app.state.instance)
    headers = {"X-Request-Id": response_id}
    if body.background:
        builder.fields["background"] = True
        builder.status = "queued"
        run.add(builder.start()[:1])
        await run.save()
        runs: dict[str, _Run] = request.app.state.background
        run.task = asyncio.create_task(_run_in_background(stream, run))
        runs[response_id] = run
        run.task.add_done_callback(lambda _: runs.pop(response_id, None))
        return JSONResponse(builder.snapshot(), headers=headers)
    # Errors before the first token keep their HTTP status (see chat.py).
    first = await anext(stream)
    if body.stream:
        frames = _stream(first, stream, run)
        return StreamingResponse(frames, media_type="text/event-stream", headers=headers)
    run.add(builder.start())
    await cancel_on_disconnect(request, _consume(first, stream, run))
    run.add(builder.finish())
    await run.save()
    return JSONResponse(builder.snapshot(), headers=headers)


class _Run:
    """One response being produced: its builder, its numbered events, and its
    record in the store (written when the request asked for storing)."""

    def __init__(
        self,
        store: ResponseStore,
        body: ResponsesRequest,
        items: list[dict[str, Any]],
        builder: ResponseBuilder,
        owner: str,
    ) -> None:
        self._store, self._body, self._items = store, body, items
        self.builder, self.owner = builder, owner
        self.events: list[dict[str, Any]] = []
        self.task: asyncio.Task[None] | None = None
        self.cancel_requested = False

    def add(self, events: list[Event]) -> list[dict[str, Any]]:
        """Number the events (sequence_number from 0, no gaps) and keep them."""
        numbered = []
        for kind, payload in events:
            event = {"type": kind, "sequence_number": len(self.events), **payload}
            self.events.append(event)
            numbered.append(event)
        return numbered

    async def save(self) -> None:
        if not self._body.store:
            return
        started = time.perf_counter()
        await self._store.put(
            StoredResponse(
                id=self.builder.response_id,
                created_at=self.builder.created_at,
                previous_response_id=self._body.previous_response_id,
                response=self.builder.snapshot(),
                input_items=self._items,
                events=self.events,
                owner=self.owner if self._body.background else "",
            )
        )
        metrics.record_store_write(self._store.backend, time.perf_counter() - started)


def _frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


async def _run_in_background(stream: AsyncIterator[pb.GenerateResponse], run: _Run) -> None:
    """A background response: generate, then store the outcome, whatever it is."""
    builder = run.builder
    try:
        builder.status = "in_progress"
        run.add(builder.start()[1:])
        await run.save()
        async for message in stream:
            run.add(builder.feed(message))
        run.add(builder.finish())
    except asyncio.CancelledError:
        if run.cancel_requested:
            builder.cancel()
        else:  # cortex is stopping
            run.add(builder.fail("server_error", "cortex stopped while this response was running"))
        await asyncio.shield(run.save())
        raise
    except NeuraxisError as e:
        run.add(builder.fail("server_error", e.message))
    except Exception:
        log.exception("background response %s failed", builder.response_id)
        run.add(builder.fail("server_error", "The server had an error while processing it."))
    await run.save()


async def fail_orphans(store: ResponseStore, owner: str) -> int:
    """At start-up: background responses this instance was running when it
    died end as failed, instead of staying in progress forever."""
    orphans = await store.running(owner)
    for record in orphans:
        response = dict(record.response)
        response["status"] = "failed"
        response["error"] = {
            "code": "server_error",
            "message": "cortex restarted while this response was running",
        }
        failed = {
            "type": "response.failed",
            "sequence_number": len(record.events),
            "response": response,
        }
        await store.put(replace(record, response=response, events=[*record.events, failed]))
    return len(orphans)


async def _consume(
    first: pb.GenerateResponse, rest: AsyncIterator[pb.GenerateResponse], run: _Run
) -> None:
    run.add(run.builder.feed(first))
    async for message in rest:
        run.add(run.builder.feed(message))


async def _stream(
    first: pb.GenerateResponse, rest: AsyncIterator[pb.GenerateResponse], run: _Run
) -> AsyncIterator[bytes]:
    builder = run.builder
    for event in run.add(builder.start()):
        yield _frame(event)
    try:
        for event in run.add(builder.feed(first)):
            yield _frame(event)
        async for message in rest:
            for event in run.add(builder.feed(message)):
                yield _frame(event)
        terminal = run.add(builder.finish())
    except NeuraxisError as e:
        terminal = run.add(builder.fail("server_error", e.message))
    except Exception:
        log.exception("response %s failed", builder.response_id)
        terminal = run.add(builder.fail("server_error", "The server had an error."))
    # Stored before the client hears the end, so an acknowledged response
    # survives a crash.
    await run.save()
    for event in terminal:
        yield _frame(event)


async def _stored(request: Request, response_id: str) -> StoredResponse:
    record = await _store(request).get(response_id)
    if record is None:
        raise NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")
    return record


@router.get("/v1/responses/{response_id}", response_model=None)
async def retrieve_response(
    response_id: str,
    request: Request,
    stream: bool = False,
    starting_after: int | None = Query(None, ge=-1),
) -> JSONResponse | StreamingResponse:
    record = await _stored(request, response_id)
    if not stream:
        return JSONResponse(record.response)
    return StreamingResponse(
        _replay(request, record, -1 if starting_after is None else starting_after),
        media_type="text/event-stream",
    )


async def _replay(request: Request, record: StoredResponse, after: int) -> AsyncIterator[bytes]:
    """The stored events after `after`; for a response still running, more as
    they are stored, until its terminal event."""
    terminal = (
        "response.completed",
        "response.incomplete",
        "response.failed",
        "response.cancelled",
    )
    while True:
        for event in record.events[after + 1 :]:
            yield _frame(event)
            after = event["sequence_number"]
            if event["type"] in terminal:
                return
        if record.status not in ("queued", "in_progress"):
            return
        await asyncio.sleep(0.25)
        refreshed = await _store(request).get(record.id)
        if refreshed is None:
            return
        record = refreshed


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
    run = request.app.state.background.get(response_id)
    if run is not None and run.task is not None:
        run.cancel_requested = True
        run.task.cancel()  # aborts the generation in the neuron
        await asyncio.gather(run.task, return_exceptions=True)
        record = await _stored(request, response_id)
    elif record.response["status"] in ("queued", "in_progress"):
        raise InvalidRequestError(
            "This response is running on another cortex instance; cancel it there.",
            param="response_id",
        )
    return JSONResponse(record.response)
