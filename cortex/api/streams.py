"""Reading neuron streams: the next message of one (a stream that ends
before its usage is an error), and several at once (one per prompt of a
legacy completion): wait for each one's first message, then interleave them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from axon.errors import InternalError
from axon.v1 import neuron_pb2 as pb

Stream = AsyncIterator[pb.GenerateResponse]


async def next_message(stream: Stream) -> pb.GenerateResponse:
    """The next message; a neuron stream ends with the message carrying
    usage, so running out before that is the server's failure."""
    try:
        return await anext(stream)
    except StopAsyncIteration:
        raise InternalError("The stream ended early.") from None


async def first_messages(streams: list[Stream]) -> list[pb.GenerateResponse]:
    """The first message of every stream; if one fails, close them all and
    raise its error (so that it becomes the HTTP status)."""
    results = await asyncio.gather(*(anext(s) for s in streams), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        for s in streams:
            await s.aclose()  # type: ignore[attr-defined]
        raise failures[0]
    return [r for r in results if isinstance(r, pb.GenerateResponse)]


async def merge(
    firsts: list[pb.GenerateResponse], streams: list[Stream]
) -> AsyncIterator[tuple[int, pb.GenerateResponse]]:
    """(stream index, message) in arrival order, each stream's first message
    first. A stream ends after its message with usage."""
    for i, first in enumerate(firsts):
        yield i, first
    pending = {i for i, first in enumerate(firsts) if not first.HasField("usage")}
    if len(pending) == 1:  # the common case: no tasks needed
        (i,) = pending
        async for message in streams[i]:
            yield i, message
        return
    # Bounded: a message per stream waits here at most, so a client that
    # stops reading stops the pumps, and gRPC's flow control the neurons.
    queue: asyncio.Queue[tuple[int, pb.GenerateResponse | BaseException | None]] = asyncio.Queue(
        maxsize=len(pending)
    )

    async def pump(i: int) -> None:
        try:
            async for message in streams[i]:
                await queue.put((i, message))
            await queue.put((i, None))
        except asyncio.CancelledError:
            raise  # the reader left: nobody would take what a put waits to give
        except BaseException as e:  # handed to the reader, which raises it
            await queue.put((i, e))

    tasks = [asyncio.create_task(pump(i)) for i in pending]
    try:
        while pending:
            i, item = await queue.get()
            if item is None:
                pending.discard(i)
            elif isinstance(item, BaseException):
                raise item
            else:
                yield i, item
    finally:
        for task in tasks:
            task.cancel()
