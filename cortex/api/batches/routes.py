"""The Batch API: create, retrieve, list and cancel, in OpenAI's shapes.
A batch belongs to the caller's tenant (404 to every other) and runs with
the caller's principal (its key's models and limits); the runner
(runner.py) on any instance sharing the store takes it from there.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from axon.errors import InvalidRequestError, NotFoundError
from cortex.api.batches import lifecycle, principal
from cortex.api.batches.files import ordered_id
from cortex.api.batches.files_routes import batch_store, no_such_file, owned_file
from cortex.api.owned import list_page, owned
from cortex.api.route import CountedRoute
from cortex.http.context import context_of
from cortex.schemas.batches import BatchCreateRequest
from cortex.store.batches import StoredBatch

router = APIRouter(route_class=CountedRoute)


async def _owned(request: Request, batch_id: str) -> StoredBatch:
    record = await batch_store(request).get_batch(batch_id)
    missing = NotFoundError(f"No such Batch object: {batch_id}", param="batch_id")
    return owned(request, record, missing)


@router.post("/v1/batches")
async def create_batch(body: BatchCreateRequest, request: Request) -> JSONResponse:
    caller = context_of(request).principal
    try:
        file = await owned_file(request, body.input_file_id)
    except NotFoundError:
        raise no_such_file(body.input_file_id, "input_file_id") from None
    if file.purpose != "batch":
        raise InvalidRequestError(
            f"The file {file.id} was not uploaded with purpose 'batch'.", param="input_file_id"
        )
    now = int(time.time())
    batch_id = ordered_id("batch_")
    batch = lifecycle.new_batch(
        batch_id, file.id, body.endpoint, body.completion_window, body.metadata, now
    )
    await batch_store(request).create_batch(
        StoredBatch(batch_id, caller.tenant, now, batch, principal.to_json(caller))
    )
    return JSONResponse(batch)


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, request: Request) -> JSONResponse:
    return JSONResponse((await _owned(request, batch_id)).batch)


@router.get("/v1/batches")
async def list_batches(
    request: Request, limit: int = Query(20, ge=1, le=100), after: str | None = None
) -> JSONResponse:
    cursor = await _owned(request, after) if after is not None else None
    tenant = context_of(request).principal.tenant
    page = await batch_store(request).list_batches(tenant, limit + 1, cursor)
    return JSONResponse(list_page([b.batch for b in page], limit))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request) -> JSONResponse:
    """Cancelling: the runner holding it stops its lines at its next lease
    renewal and ends it cancelled, with the files of the lines done."""
    store = batch_store(request)
    while True:
        record = await _owned(request, batch_id)
        batch = record.batch
        if batch["status"] in ("cancelling", "cancelled"):
            return JSONResponse(batch)
        if not lifecycle.can_move(batch["status"], "cancelling"):
            raise InvalidRequestError(
                f"A batch that is {batch['status']} cannot be cancelled.", param="batch_id"
            )
        cancelling = lifecycle.moved(batch, "cancelling", int(time.time()))
        if await store.swap(batch_id, batch["status"], cancelling):
            return JSONResponse(cancelling)
