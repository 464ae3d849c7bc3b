"""The Responses API routes: create (streamed, non-streamed or background),
retrieve (or replay its events), delete, input_items and cancel.

Only the HTTP side lives here: translation is in translate.py, the run of a
response (and how every run ends and is stored) in run.py, leases and
retention in upkeep.py. A DELETE of a response running in this process stops
its run at once (other processes' runs stop at their next lease renewal).

A stored response belongs to the caller's tenant (cortex/auth/principal.py);
to every other tenant each route answers 404, as for an id that does not
exist.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from axon.errors import InvalidRequestError, NotFoundError
from cortex.api import caps, dispatch
from cortex.api.answers import entries, json_answer
from cortex.api.gateway import gateway_of
from cortex.api.owned import list_page, owned
from cortex.api.responses import run as runs
from cortex.api.responses.builder import ResponseBuilder
from cortex.api.responses.events import TERMINAL
from cortex.api.responses.fields import request_fields
from cortex.api.responses.items import normalise, parse_items
from cortex.api.responses.translate import generation_params, history, to_generate_request
from cortex.api.responses.upkeep import fail_expired
from cortex.api.route import CountedRoute
from cortex.http.context import context_of
from cortex.http.sse import event_frame
from cortex.routing.policy import RouteHints
from cortex.schemas.responses import ResponsesRequest
from cortex.schemas.surfaces import RESPONSES
from cortex.store.base import RUNNING, ResponseStore, StoredResponse

router = APIRouter(route_class=CountedRoute)


def _store(request: Request) -> ResponseStore:
    return gateway_of(request).store


@router.post("/v1/responses", response_model=None)
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    gateway = gateway_of(request)
    shared = generation_params(body, gateway.recorder)
    store = gateway.store
    response_id = dispatch.claim(request, RESPONSES)
    items = [normalise(i) for i in body.items()]
    tenant = context_of(request).principal.tenant
    if body.store and gateway.quota is not None:
        await gateway.quota.check(tenant, int(request.headers.get("content-length") or 0))
    previous = body.previous_response_id
    earlier = await history(store, previous, tenant) if previous else []
    internal = to_generate_request(
        shared, body.instructions, earlier + parse_items(items), response_id
    )
    # The internal request's id is the response id, which is what a policy
    # remembers a chain by (on_complete) and what the next turn names as
    # previous_response_id.
    hints = RouteHints(previous_response_id=previous, prompt_cache_key=body.prompt_cache_key)
    # A stored run that outlives this request's first answer (background, or
    # streamed) is owned by this process: it renews its lease.
    owned = body.store and (body.background or body.stream)
    run = runs.ResponseRun(
        store,
        ResponseBuilder(
            response_id,
            int(time.time()),
            request_fields(body),
            max_tool_calls=body.max_tool_calls,
        ),
        previous_response_id=body.previous_response_id,
        input_items=items,
        stored=body.store,
        owner=gateway.runs.instance if owned else "",
        tenant=tenant,
        lease_s=gateway.runs.lease_s,
        recorder=gateway.recorder,
    )
    headers = {"X-Request-Id": response_id}
    if body.background:
        here = gateway.runs
        # Checked and claimed with no await between: a burst cannot pass the
        # cap while earlier ones are still being routed and stored.
        caps.check_background(gateway.caps, tenant, here.background_tenants())
        here.starting.append(tenant)
        try:
            (stream,) = await dispatch.route(request, [internal], hints)
            await runs.start_background(run, stream, here.background)
        finally:
            here.starting.remove(tenant)  # in `background` by now, or failed
        return JSONResponse(run.builder.snapshot(), headers=headers)
    started = await dispatch.start(request, [internal], hints)
    first, rest = started.only
    if body.stream:
        registry = gateway.runs.streaming if body.store else None
        frames = runs.stream(run, first, rest, registry)
        return StreamingResponse(frames, media_type="text/event-stream", headers=headers)
    await runs.complete(request, run, first, rest)
    usage = run.builder.usage or {}
    size = entries(int(usage.get("output_tokens", 0)), body.top_logprobs)
    return await json_answer(run.builder.snapshot, size, headers)


async def _stored(request: Request, response_id: str) -> StoredResponse:
    record = await _store(request).get(response_id)
    return owned(request, record, _not_found(response_id))


def _not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")


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
    they are stored, until its terminal event (a response whose lease expired
    is ended as failed here, so the replay ends too)."""
    while True:
        for event in record.events[after + 1 :]:
            yield event_frame(event["type"], json.dumps(event))
            after = event["sequence_number"]
            if event["type"] in TERMINAL:
                return
        if record.status not in RUNNING:
            return
        if 0 < record.lease_until < time.time():
            await fail_expired(_store(request), record, gateway_of(request).recorder)
        else:
            await asyncio.sleep(0.25)
        refreshed = await _store(request).get(record.id)
        if refreshed is None:
            return
        record = refreshed


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> JSONResponse:
    await _stored(request, response_id)  # another tenant's: 404 before anything is deleted
    if not await _store(request).delete(response_id):
        raise _not_found(response_id)
    for registry in (gateway_of(request).runs.background, gateway_of(request).runs.streaming):
        run = registry.get(response_id)
        if run is not None:
            run.stop()  # aborts the generation; the run stores nothing more
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
    return JSONResponse(list_page(items, limit))


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> JSONResponse:
    record = await _stored(request, response_id)
    if not record.response.get("background"):
        raise InvalidRequestError(
            "Only responses created with 'background': true can be cancelled.",
            param="response_id",
        )
    run = gateway_of(request).runs.background.get(response_id)
    if run is not None and run.task is not None:
        await runs.cancel(run)
        record = await _stored(request, response_id)
    elif record.response["status"] in ("queued", "in_progress"):
        raise InvalidRequestError(
            "This response is running on another cortex instance; cancel it there.",
            param="response_id",
        )
    return JSONResponse(record.response)
