"""Server-sent events, framed only here at the HTTP edge.

`sse` is the one stream wrapper every streamed answer goes through: it frames
the typed objects an endpoint yields, and owns the end of the stream. When
the body fails (a typed error from the neuron, or anything unexpected, which
is logged with the request id), the API's `Framing` turns the error into its
terminal frames, built from the error table; if even that fails, a last
frame that cannot fail is sent. A stream therefore never ends without a
terminal event. What the objects are, and what ends an API's stream, is the
`Framing`'s business:

- `ChunkFraming` (chat and legacy completions): `data: {json}` chunks, an
  error envelope chunk on failure, and `data: [DONE]` in every case.
- The Responses API's framing (`cortex.api.responses.run`): `event:` and
  `data:` lines, ending with the response's own terminal event.

The body yields *groups*: the objects made from one neuron message (a
token's chunks for several choices, a Responses delta with the events that
open or close items around it). A group is framed into one bytes object, so
that one neuron message costs one body chunk, one `transport.write` and
one trip through the ASGI send chain, however many frames it holds (one
write per frame was 14 % of cortex's time at 64 streams). A group is never
held back to wait for the next: nothing is delayed.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Generic, TypeVar

from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from axon.errors import InternalError, NeuraxisError
from cortex.http.errors import error_envelope, unexpected_message

log = logging.getLogger("neuraxis.cortex")

DONE = b"data: [DONE]\n\n"

T = TypeVar("T")


def data_frame(payload: str) -> bytes:
    return b"data: " + payload.encode() + b"\n\n"


def event_frame(kind: str, payload: str) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + payload.encode() + b"\n\n"


class Framing(abc.ABC, Generic[T]):
    """How one API's stream is framed and how it ends."""

    closing = b""  # sent after everything, whatever happened

    @abc.abstractmethod
    def frame(self, item: T) -> bytes: ...

    async def completed(self) -> list[T]:
        """What follows a body that ended normally."""
        return []

    @abc.abstractmethod
    async def failed(self, error: NeuraxisError) -> list[T]:
        """The terminal objects for a body that failed with `error`."""

    @abc.abstractmethod
    def last_resort(self, error: NeuraxisError) -> bytes:
        """A terminal frame for when `failed` itself failed; must not raise."""


async def sse(
    body: AsyncIterator[Sequence[T]], framing: Framing[T], request_id: str
) -> AsyncIterator[bytes]:
    """Frame `body`, one bytes object per group, then its end: the framing's
    completion, or its error."""
    extra = {"request_id": request_id}
    try:
        async for group in body:
            if group:
                yield b"".join([framing.frame(item) for item in group])
        tail = [framing.frame(item) for item in await framing.completed()]
    except NeuraxisError as e:
        if type(e) is InternalError:  # not a subclass: those say what happened on purpose
            log.error("stream failed: %s", e.message, extra=extra)
            e = InternalError(unexpected_message(request_id))
        log.info("stream ended with %s: %s", e.kind, e.message, extra=extra)
        tail = await _failed(framing, e, request_id)
    except Exception:
        log.exception("stream failed", extra=extra)
        tail = await _failed(framing, InternalError(unexpected_message(request_id)), request_id)
    # The ending is one write as well (a Responses stream's closing events:
    # the text, part and item done, then response.completed).
    if tail:
        yield b"".join(tail)
    if framing.closing:
        yield framing.closing


async def _failed(framing: Framing[T], error: NeuraxisError, request_id: str) -> list[bytes]:
    try:
        return [framing.frame(item) for item in await framing.failed(error)]
    except Exception:
        log.exception("could not end the stream with its error", extra={"request_id": request_id})
        return [framing.last_resort(error)]


# A chunk of a chat or legacy completion stream: its model, or its JSON
# already encoded (cortex/api/text_chunks.py: the text-only chunk of each token).
Chunk = BaseModel | bytes


class ChunkFraming(Framing[Chunk]):
    """OpenAI's chunk streams (chat and legacy completions): one `data:`
    line per chunk, the error envelope as a chunk, `data: [DONE]` last."""

    closing = DONE

    def __init__(self, exclude: set[str] | None = None) -> None:
        self._exclude = exclude

    def frame(self, item: Chunk) -> bytes:
        if isinstance(item, bytes):
            return b"data: " + item + b"\n\n"
        return data_frame(item.model_dump_json(exclude=self._exclude))

    async def failed(self, error: NeuraxisError) -> list[Chunk]:
        return [error_envelope(error)]

    def last_resort(self, error: NeuraxisError) -> bytes:
        return data_frame(error_envelope(error).model_dump_json())


def chunk_exclusions(include_usage: bool) -> set[str] | None:
    """What a stream's chunks leave out: with include_usage every chunk
    carries "usage": null; without it the key is left out, as OpenAI does."""
    return None if include_usage else {"usage"}


def chunk_response(
    chunks: AsyncIterator[Sequence[Chunk]], request_id: str, include_usage: bool
) -> StreamingResponse:
    """A streamed chat or legacy completion (chunks grouped per neuron
    message; those already encoded made with `chunk_exclusions`)."""
    framing = ChunkFraming(exclude=chunk_exclusions(include_usage))
    return StreamingResponse(
        sse(chunks, framing, request_id),
        media_type="text/event-stream",
        headers={"X-Request-Id": request_id},
    )
