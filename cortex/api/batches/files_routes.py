"""The Files API: upload (multipart, purpose "batch"), list, retrieve,
content and delete, in OpenAI's shapes. A file belongs to the caller's
tenant; to every other tenant each route answers 404, as for an id that
does not exist. Content goes in and out a chunk at a time (files.py):
the upload is spooled by the multipart parser (to disk past 1 MiB), then
stored in chunks; a download reads one chunk per query.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import JSONResponse, StreamingResponse

from axon.errors import InvalidRequestError, NotFoundError
from cortex.api.batches.files import file_object, new_file_id, write_file
from cortex.api.gateway import gateway_of
from cortex.api.owned import list_page, owned
from cortex.api.route import CountedRoute
from cortex.http.context import context_of
from cortex.store.batches import BatchStore, StoredFile

router = APIRouter(route_class=CountedRoute)
PURPOSES = ("batch",)
# What a multipart upload adds to its file: boundaries, the purpose field.
MULTIPART_OVERHEAD = 64 * 1024


def batch_store(request: Request) -> BatchStore:
    store = gateway_of(request).batches
    if store is None:
        raise RuntimeError("the Files API without a batch store")
    return store


def no_such_file(file_id: str, param: str = "id") -> NotFoundError:
    return NotFoundError(f"No such File object: {file_id}", param=param)


async def owned_file(request: Request, file_id: str) -> StoredFile:
    return owned(request, await batch_store(request).get_file(file_id), no_such_file(file_id))


@router.post("/v1/files")
async def create_file(
    request: Request, file: Annotated[UploadFile, File()], purpose: Annotated[str, Form()]
) -> JSONResponse:
    if purpose not in PURPOSES:
        raise InvalidRequestError(
            f"'{purpose}' is not a supported purpose: only 'batch' files are kept.",
            param="purpose",
        )
    settings = gateway_of(request).files

    async def pieces() -> AsyncIterator[bytes]:
        while piece := await file.read(settings.chunk_bytes):
            yield piece

    stored = await write_file(
        batch_store(request),
        StoredFile(
            new_file_id(),
            context_of(request).principal.tenant,
            int(time.time()),
            "",
            purpose,
            file.filename or "upload.jsonl",
        ),
        pieces(),
        settings.chunk_bytes,
        settings.max_bytes,
        settings.max_lines,
    )
    return JSONResponse(file_object(stored))


@router.get("/v1/files")
async def list_files(
    request: Request,
    purpose: str | None = None,
    limit: int = Query(10_000, ge=1, le=10_000),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> JSONResponse:
    cursor = await owned_file(request, after) if after is not None else None
    tenant = context_of(request).principal.tenant
    page = await batch_store(request).list_files(
        tenant, purpose, limit + 1, cursor, order == "desc"
    )
    return JSONResponse(list_page([file_object(f) for f in page], limit))


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, request: Request) -> JSONResponse:
    return JSONResponse(file_object(await owned_file(request, file_id)))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, request: Request) -> StreamingResponse:
    file = await owned_file(request, file_id)
    return StreamingResponse(
        batch_store(request).chunks(file.id),
        media_type="application/octet-stream",
        headers={"Content-Length": str(file.bytes)},
    )


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, request: Request) -> JSONResponse:
    await owned_file(request, file_id)
    if not await batch_store(request).delete_file(file_id):
        raise no_such_file(file_id)
    return JSONResponse({"id": file_id, "object": "file", "deleted": True})
