"""Writing and reading a stored file a chunk at a time (the upload, the
batch's output and error files) and counting its lines: what the Files
routes and the batch runner share."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from axon.errors import InvalidRequestError, RequestTooLargeError
from cortex.api.batches.lines import split_lines
from cortex.store.batches import PROCESSED, BatchStore, StoredFile


def ordered_id(prefix: str) -> str:
    """A new id that sorts after every earlier one (nanoseconds first, in
    16 hex digits, then randomness): lists are in creation order by
    (created_at, id) even within one second."""
    return f"{prefix}{time.time_ns():016x}{uuid.uuid4().hex[:16]}"


def new_file_id() -> str:
    return ordered_id("file-")


def file_object(file: StoredFile) -> dict[str, Any]:
    """OpenAI's FileObject."""
    return {
        "id": file.id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": file.created_at,
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


class _Rechunk:
    """Pieces of any size in, chunks of exactly `size` out (the last shorter)."""

    def __init__(self, size: int) -> None:
        self.size, self.pending = size, bytearray()

    def add(self, piece: bytes) -> list[bytes]:
        self.pending += piece
        out = []
        while len(self.pending) >= self.size:
            out.append(bytes(self.pending[: self.size]))
            del self.pending[: self.size]
        return out


async def write_file(
    store: BatchStore,
    file: StoredFile,
    pieces: AsyncIterable[bytes],
    chunk_bytes: int,
    max_bytes: int,
    max_lines: int,
) -> StoredFile:
    """Store `pieces` as `file`'s content, in chunks of `chunk_bytes`; 413
    past `max_bytes`, 400 past `max_lines` (nothing is kept then)."""
    await store.begin_file(file)
    size = lines = seq = 0
    last = b"\n"
    rechunk = _Rechunk(chunk_bytes)
    try:
        async for piece in pieces:
            if not piece:
                continue
            size += len(piece)
            lines += piece.count(b"\n")
            last = piece[-1:]
            if size > max_bytes:
                raise RequestTooLargeError(
                    f"The file is larger than the limit of {max_bytes} bytes."
                )
            if lines > max_lines:
                raise InvalidRequestError(
                    f"The file has more than the limit of {max_lines} lines.", param="file"
                )
            for chunk in rechunk.add(piece):
                await store.add_chunk(file.id, seq, chunk)
                seq += 1
        if rechunk.pending:
            await store.add_chunk(file.id, seq, bytes(rechunk.pending))
        lines += last != b"\n"  # a last line without its newline
        if lines > max_lines:
            raise InvalidRequestError(
                f"The file has more than the limit of {max_lines} lines.", param="file"
            )
    except BaseException:
        await store.delete_file(file.id)
        raise
    await store.end_file(file.id, size, lines)
    return StoredFile(
        file.id, file.tenant, file.created_at, PROCESSED, file.purpose, file.filename, size, lines
    )


async def file_lines(store: BatchStore, file_id: str) -> AsyncIterator[tuple[int, bytes]]:
    """The file's lines, numbered from 1, read a chunk at a time."""
    buffer = bytearray()
    number = 0
    async for chunk in store.chunks(file_id):
        for raw in split_lines(buffer, chunk):
            number += 1
            yield number, raw
    if buffer:
        yield number + 1, bytes(buffer)
