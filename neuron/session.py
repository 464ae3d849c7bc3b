"""The neuron's side of the batched token stream (Neuron.Session, issue 29):
one long-lived stream per cortex process whose requests are started and
cancelled on it, and whose output goes back batched.

A session reads starts and cancels (`_read`); each started request runs as
its own task through the servicer's `generation`, the very code a Generate
call runs, and puts its messages, its error or its end into the session's
`Outbox`. The sender (`Session.serve`) takes everything queued at each
wakeup as one SessionDown: the requests woken by one engine step have all
run before the sender is, so one step's deltas travel in one message
instead of one gRPC message per request per token.

What the per-request call gives, kept: a cancel (or the session's end,
cortex gone) cancels the request's task, which aborts it in the engine as a
cancelled Generate call does; the start's deadline bounds the request as a
call's gRPC timeout does; an error ends its own request only. While the
neuron drains (`Sessions.drain`) new starts are refused as unavailable (cortex
retries them elsewhere, as it does a Generate refused by a stopping server)
and each session ends once its requests have.

The servicer owns the gRPC method (servicer.py); what lives here is plain
asyncio over protobuf messages, testable without a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable

from axon.errors import (
    DEADLINE_MESSAGE,
    DeadlineExceededError,
    InternalError,
    NeuraxisError,
    UnavailableError,
    mapping_for,
)
from axon.v1 import neuron_pb2 as pb

log = logging.getLogger("neuraxis.neuron")

# A call's metadata as the servicer's `generation` takes it.
Metadata = Iterable[tuple[str, str | bytes]]
Generation = Callable[[pb.GenerateRequest, Metadata], AsyncGenerator[pb.GenerateResponse, None]]

# A SessionDown is cut before it passes this size: far under the 64 MiB
# message limit both ends set (axon/grpc_limits.py), so that many large
# messages (logprobs, n choices) queued together never break the session.
BATCH_BYTES = 4 * 1024 * 1024


def error_item(request_id: int, error: NeuraxisError) -> pb.SessionItem:
    """The item that ends a failed request: what Generate's status and
    trailing metadata would have said."""
    failure = pb.SessionError(
        code=mapping_for(error).grpc_code,
        message=error.message,
        kind=error.kind,
        param=error.param or "",
    )
    return pb.SessionItem(id=request_id, error=failure)


def batches(items: list[pb.SessionItem], limit: int = BATCH_BYTES) -> list[pb.SessionDown]:
    """`items` in order as few SessionDown messages as `limit` allows (an
    item larger than `limit` alone in its message)."""
    if not items:
        return []
    out = [pb.SessionDown()]
    size = 0
    for item in items:
        # Items are a token's delta, unless logprobs or n choices make them
        # large; one alone needs no measuring.
        item_size = item.ByteSize() if len(items) > 1 else 0
        if size and size + item_size > limit:
            out.append(pb.SessionDown())
            size = 0
        out[-1].items.append(item)
        size += item_size
    return out


class Outbox:
    """What the session's requests produced since the sender last ran."""

    def __init__(self) -> None:
        self._items: list[pb.SessionItem] = []
        self.ready = asyncio.Event()

    def put(self, item: pb.SessionItem) -> None:
        self._items.append(item)
        self.ready.set()

    def take(self) -> list[pb.SessionDown]:
        items, self._items = self._items, []
        self.ready.clear()
        return batches(items)


class Session:
    """One cortex process's session: its requests and its outbox."""

    def __init__(self, generation: Generation, refusal: Callable[[], NeuraxisError | None]) -> None:
        self._generation = generation
        self._refusal = refusal
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.outbox = Outbox()
        self._reading = True
        self.aborted = 0  # requests still running when the session ended

    def wake(self) -> None:
        self.outbox.ready.set()

    async def serve(
        self, upstream: AsyncIterator[pb.SessionUp]
    ) -> AsyncGenerator[pb.SessionDown, None]:
        """The session's messages to cortex until cortex has closed its side
        (or the neuron drains) and every request has ended; its requests
        are cancelled, so aborted in the engine, when it ends otherwise."""
        reader = asyncio.create_task(self._read(upstream))
        try:
            while True:
                await self.outbox.ready.wait()
                for batch in self.outbox.take():
                    yield batch
                if not self._tasks and (not self._reading or self._refusal() is not None):
                    return
        finally:
            self.aborted = len(self._tasks)
            reader.cancel()
            tasks = [reader, *self._tasks.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self, upstream: AsyncIterator[pb.SessionUp]) -> None:
        try:
            async for message in upstream:
                if message.HasField("start"):
                    self.start(message.start)
                elif message.HasField("cancel"):
                    self.cancel(message.cancel.id)
        finally:
            self._reading = False
            self.wake()

    def start(self, start: pb.SessionStart) -> None:
        refusal = self._refusal()
        if refusal is not None:
            self.outbox.put(error_item(start.id, refusal))
            return
        if start.id in self._tasks:  # cortex never reuses an id: a bug, said once
            log.error("session start reuses the id of a running request: %d", start.id)
            return
        self._tasks[start.id] = asyncio.create_task(self._run(start))

    def cancel(self, request_id: int) -> None:
        """The request's task cancelled: its engine request aborted. An id
        that has ended meanwhile is ignored."""
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    async def _run(self, start: pb.SessionStart) -> None:
        request_id = start.id
        item: pb.SessionItem | None = None
        try:
            responses = self._generation(start.request, tuple(start.metadata.items()))
            async with (
                asyncio.timeout(start.timeout_s or None),
                contextlib.aclosing(responses),
            ):
                async for response in responses:
                    self.outbox.put(pb.SessionItem(id=request_id, response=response))
            item = pb.SessionItem(id=request_id, end=pb.SessionEnd())
        except NeuraxisError as e:
            item = error_item(request_id, e)
        except TimeoutError:
            item = error_item(request_id, DeadlineExceededError(DEADLINE_MESSAGE))
        except Exception:
            # The generation types its errors; anything else (a bug) still
            # ends its request, never leaves cortex waiting for an end.
            log.exception("session request %d failed", request_id)
            item = error_item(request_id, InternalError("internal error in the neuron"))
        finally:
            # Cancelled (a cancel, or the session's end): nothing to say.
            del self._tasks[request_id]
            if item is not None:
                self.outbox.put(item)
            else:
                self.wake()


class Sessions:
    """The neuron's sessions: served one per Session call, refused new
    requests while the neuron drains."""

    def __init__(self, generation: Generation) -> None:
        self._generation = generation
        self._live: set[Session] = set()
        self._draining = False

    def _refusal(self) -> NeuraxisError | None:
        if self._draining:
            return UnavailableError("the neuron is shutting down")
        return None

    async def serve(self, upstream: AsyncIterator[pb.SessionUp]) -> AsyncIterator[pb.SessionDown]:
        session = Session(self._generation, self._refusal)
        self._live.add(session)
        log.info("token stream session opened (%d open)", len(self._live))
        try:
            async with contextlib.aclosing(session.serve(upstream)) as batches_:
                async for batch in batches_:
                    yield batch
        finally:
            self._live.discard(session)
            # Its requests still running were aborted in the engine.
            log.info("token stream session closed, %d requests aborted", session.aborted)

    def drain(self) -> None:
        """No new requests; each session ends once its requests have, so
        that the server's graceful stop waits for requests, not sessions."""
        self._draining = True
        for session in self._live:
            session.wake()
