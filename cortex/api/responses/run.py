"""The run of one response: foreground (streamed or not), background,
cancel, and the recovery of orphans after a restart.

Every way a response ends goes through its builder (`finish`, `fail`,
`cancel`) and `ResponseRun.end`, which stores the outcome before anyone is
told of it, so an acknowledged response survives a crash of cortex. The
routes (routes.py) decide which run to start; translation lives in
translate.py, engine output → items in builder.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Request

from cortex import metrics
from cortex.api.disconnect import cancel_on_disconnect
from cortex.api.errors import response_error_code
from cortex.api.responses.builder import ResponseBuilder
from cortex.api.responses.events import ErrorEvent, ResponseEvent, parse_event
from cortex.sse import UNEXPECTED, Framing, event_frame, sse
from cortex.store.base import ResponseStore, StoredResponse
from neuraxis.core.errors import InternalError, NeuraxisError, UnavailableError
from neuraxis.core.v1 import neuron_pb2 as pb

log = logging.getLogger("neuraxis.cortex")

Stream = AsyncIterator[pb.GenerateResponse]


class ResponseRun:
    """One response being produced: its builder, its numbered events, and its
    record in the store (written when the request asked for storing)."""

    def __init__(
        self,
        store: ResponseStore,
        builder: ResponseBuilder,
        *,
        previous_response_id: str | None,
        input_items: list[dict[str, Any]],
        stored: bool,
        owner: str = "",
        tenant: str = "",
        events: Sequence[ResponseEvent] = (),
    ) -> None:
        self._store, self.builder = store, builder
        self._previous, self._items, self._stored = previous_response_id, input_items, stored
        self.owner = owner  # set for background responses: the instance running it
        self.tenant = tenant  # whose key made it: nobody else sees it
        self.events: list[ResponseEvent] = list(events)
        self.task: asyncio.Task[None] | None = None
        self.cancel_requested = False

    @classmethod
    def resume(cls, store: ResponseStore, record: StoredResponse) -> ResponseRun:
        """The run of a stored response, to be ended (orphan recovery)."""
        return cls(
            store,
            ResponseBuilder.resume(record.response, record.events),
            previous_response_id=record.previous_response_id,
            input_items=record.input_items,
            stored=True,
            owner=record.owner,
            tenant=record.tenant,
            events=[parse_event(e) for e in record.events],
        )

    @property
    def response_id(self) -> str:
        return self.builder.response_id

    def add(self, events: list[ResponseEvent]) -> list[ResponseEvent]:
        """Number the events (sequence_number from 0, no gaps) and keep them."""
        for event in events:
            event.sequence_number = len(self.events)
            self.events.append(event)
        return events

    async def save(self) -> None:
        if not self._stored:
            return
        started = time.perf_counter()
        await self._store.put(
            StoredResponse(
                id=self.builder.response_id,
                created_at=self.builder.created_at,
                previous_response_id=self._previous,
                response=self.builder.snapshot(),
                input_items=self._items,
                events=[e.model_dump() for e in self.events],
                owner=self.owner,
                tenant=self.tenant,
            )
        )
        metrics.record_store_write(self._store.backend, time.perf_counter() - started)

    async def end(self, error: NeuraxisError | None = None) -> list[ResponseEvent]:
        """End the response (normally, or failed with `error`'s code from the
        error table), store it, and return its last events."""
        if error is None:
            events = self.add(self.builder.finish())
        else:
            events = self.add(self.builder.fail(response_error_code(error), error.message))
        await self.save()
        return events


async def _feed(run: ResponseRun, first: pb.GenerateResponse, rest: Stream) -> None:
    run.add(run.builder.feed(first))
    async for message in rest:
        run.add(run.builder.feed(message))


async def complete(
    request: Request, run: ResponseRun, first: pb.GenerateResponse, rest: Stream
) -> None:
    """A non-streamed response: generated whole, then ended. A failure
    propagates and becomes the HTTP error."""
    run.add(run.builder.start())
    await cancel_on_disconnect(request, _feed(run, first, rest))
    await run.end()


class _Framing(Framing[ResponseEvent]):
    """`event:` and `data:` lines; the stream ends with the response's own
    terminal event, stored before it is sent."""

    def __init__(self, run: ResponseRun) -> None:
        self._run = run

    def frame(self, item: ResponseEvent) -> bytes:
        return event_frame(item.type, item.model_dump_json())

    async def completed(self) -> list[ResponseEvent]:
        return await self._run.end()

    async def failed(self, error: NeuraxisError) -> list[ResponseEvent]:
        return await self._run.end(error)

    def last_resort(self, error: NeuraxisError) -> bytes:
        event = ErrorEvent(
            code=response_error_code(error),
            message=error.message,
            param=error.param,
            sequence_number=len(self._run.events),
        )
        return self.frame(event)


async def _events(
    run: ResponseRun, first: pb.GenerateResponse, rest: Stream
) -> AsyncIterator[ResponseEvent]:
    for event in run.add(run.builder.start()):
        yield event
    for event in run.add(run.builder.feed(first)):
        yield event
    async for message in rest:
        for event in run.add(run.builder.feed(message)):
            yield event


def stream(run: ResponseRun, first: pb.GenerateResponse, rest: Stream) -> AsyncIterator[bytes]:
    """A streamed response, framed at the edge."""
    return sse(_events(run, first, rest), _Framing(run), run.response_id)


async def start_background(run: ResponseRun, rest: Stream, runs: dict[str, ResponseRun]) -> None:
    """Store the queued response, then run it as a task of this instance
    (kept in `runs` until it ends, for cancel)."""
    run.builder.fields["background"] = True
    run.builder.status = "queued"
    run.add(run.builder.start()[:1])
    await run.save()
    run.task = asyncio.create_task(_background(run, rest))
    runs[run.response_id] = run
    run.task.add_done_callback(lambda _: runs.pop(run.response_id, None))


async def _background(run: ResponseRun, rest: Stream) -> None:
    """Generate, then store the outcome, whatever it is."""
    builder = run.builder
    error: NeuraxisError | None = None
    try:
        builder.status = "in_progress"
        run.add(builder.start()[1:])
        await run.save()
        async for message in rest:
            run.add(builder.feed(message))
    except asyncio.CancelledError:
        if run.cancel_requested:
            builder.cancel()
            await asyncio.shield(run.save())
        else:  # cortex is stopping
            stopping = UnavailableError("cortex stopped while this response was running")
            await asyncio.shield(run.end(stopping))
        raise
    except NeuraxisError as e:
        error = e
    except Exception:
        log.exception("background response failed", extra={"request_id": run.response_id})
        error = InternalError(UNEXPECTED)
    await run.end(error)


async def cancel(run: ResponseRun) -> None:
    """Cancel a background response running here: the task's cancellation
    aborts the generation in the neuron; the run stores it as cancelled."""
    if run.task is None:
        return
    run.cancel_requested = True
    run.task.cancel()
    await asyncio.gather(run.task, return_exceptions=True)


async def fail_orphans(store: ResponseStore, owner: str) -> int:
    """At start-up: background responses this instance was running when it
    died end as failed (their open items closed, as for any failure),
    instead of staying in progress forever."""
    orphans = await store.running(owner)
    for record in orphans:
        run = ResponseRun.resume(store, record)
        await run.end(UnavailableError("cortex restarted while this response was running"))
    return len(orphans)
