"""The run of one response: foreground (streamed or not), background,
cancel, stop (the response was deleted), and the end of orphans (after a
restart, or when their lease expired).

Every way a response ends goes through its builder (`finish`, `fail`,
`cancel`) and `ResponseRun.end`, which stores the outcome before anyone is
told of it, so an acknowledged response survives a crash of cortex. A store
write that fails is counted (`neuraxis_store_errors_total`) and becomes a
`StoreWriteError`; a stream then still ends with `response.failed`. A stored
run that is running (background, or streamed) has a row with a lease from
its start (renewed by upkeep.py) and is kept in its instance's registry, so
that a DELETE can stop it; a deleted run is never stored again. The routes
(routes.py) decide which run to start; translation lives in translate.py,
engine output → items in builder.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import Request

from axon.errors import InternalError, NeuraxisError, UnavailableError
from axon.process import pid_alive
from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.builder import ResponseBuilder
from cortex.api.responses.events import ErrorEvent, ResponseEvent, parse_event
from cortex.api.responses.pump import Pump
from cortex.http.disconnect import ClientDisconnectedError, cancel_on_disconnect
from cortex.http.errors import response_error_code, unexpected_message
from cortex.http.sse import Framing, event_frame, sse
from cortex.recording import Recorder
from cortex.store.base import RUNNING, ResponseStore, StoredResponse

log = logging.getLogger("neuraxis.cortex")

Stream = AsyncIterator[pb.GenerateResponse]
# The runs of one process that are running, by response id.
Registry = dict[str, "ResponseRun"]


class StoreWriteError(UnavailableError):
    """The store did not take a write (disk full, database down)."""


class ResponseDeletedError(InternalError):
    """The response was deleted while it ran: the run stops, unstored."""


class LeaseExpiredError(UnavailableError):
    """The instance running a response stopped renewing its lease."""


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
        recorder: Recorder,
        owner: str = "",
        tenant: str = "",
        events: Sequence[ResponseEvent] = (),
        lease_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store, self.builder, self._recorder = store, builder, recorder
        self._previous, self._items, self._stored = previous_response_id, input_items, stored
        self.owner = owner  # the instance running it (stored runs): who renews its lease
        self.tenant = tenant  # whose key made it: nobody else sees it
        self.events: list[ResponseEvent] = list(events)
        # What runs it (a background task, or the streaming handler's task):
        # what cancel and stop cancel.
        self.task: asyncio.Task[Any] | None = None
        self.cancel_requested = False
        self.deleted = False  # once set, nothing more is stored
        self._lease_s, self._clock = lease_s, clock

    @classmethod
    def resume(
        cls, store: ResponseStore, record: StoredResponse, recorder: Recorder
    ) -> ResponseRun:
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
            recorder=recorder,
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

    @property
    def stored(self) -> bool:
        return self._stored

    @property
    def running(self) -> bool:
        return self.builder.status in RUNNING

    async def save(self) -> None:
        """Store the run as it stands (with a fresh lease while it runs).
        Raises StoreWriteError if the store fails, ResponseDeletedError if
        the response was deleted meanwhile (nothing is written then)."""
        if not self._stored or self.deleted:
            return
        lease = self._clock() + self._lease_s if self.running and self._lease_s else 0.0
        record = StoredResponse(
            id=self.builder.response_id,
            created_at=self.builder.created_at,
            previous_response_id=self._previous,
            response=self.builder.snapshot(),
            input_items=self._items,
            events=[e.model_dump() for e in self.events],
            owner=self.owner,
            tenant=self.tenant,
            lease_until=lease,
        )
        started = time.perf_counter()
        try:
            written = await self._store.put(record)
        except Exception as e:
            log.exception("could not store the response", extra={"request_id": self.response_id})
            self._recorder.store_error(self._store.backend, "put")
            raise StoreWriteError("The response could not be stored.") from e
        self._recorder.store_write(self._store.backend, time.perf_counter() - started)
        if not written:
            self.deleted = True
            raise ResponseDeletedError(_DELETED)

    async def end(self, error: NeuraxisError | None = None) -> list[ResponseEvent]:
        """End the response (normally, or failed with `error`'s code from the
        error table), store it, and return its last events. If the store
        fails, the events are taken back (nobody was told) and the
        StoreWriteError raised."""
        told = len(self.events)
        if error is None:
            events = self.add(self.builder.finish())
        else:
            events = self.add(self.builder.fail(response_error_code(error), error.message))
        try:
            # Deleted meanwhile: ended anyway, unstored; whoever listens is told.
            with contextlib.suppress(ResponseDeletedError):
                await self.save()
        except StoreWriteError:
            del self.events[told:]
            raise
        return events

    def end_unstored(self, error: NeuraxisError) -> list[ResponseEvent]:
        """Fail the response without storing it (the store just failed):
        the stream still ends with response.failed."""
        self.builder.completed_at = None
        return self.add(self.builder.fail(response_error_code(error), error.message))

    def stop(self) -> None:
        """The response was deleted: stop generating (the task's
        cancellation aborts the generation in the neuron), store nothing."""
        self.deleted = True
        if self.task is not None and not self.task.done() and self.running:
            self.task.cancel()


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
        try:
            return await self._run.end(error)
        except StoreWriteError:
            return self._run.end_unstored(error)

    def last_resort(self, error: NeuraxisError) -> bytes:
        event = ErrorEvent(
            code=response_error_code(error),
            message=error.message,
            param=error.param,
            sequence_number=len(self._run.events),
        )
        return self.frame(event)


async def _events(
    run: ResponseRun, first: pb.GenerateResponse, rest: Stream, registry: Registry
) -> AsyncIterator[list[ResponseEvent]]:
    # One group per neuron message, written in one piece (`sse.py`).
    messages, pump = rest, None
    try:
        yield run.add(run.builder.start()) + run.add(run.builder.feed(first))
        # A stored stream has its row (and lease) from here, so that it can
        # be deleted, and stopped, while it runs; written after the first
        # token is out, while the neuron makes the next.
        await run.save()
        if run.stored:
            pump = Pump(rest, lambda: ResponseDeletedError(_DELETED))
            messages = aiter(pump)
            run.task = pump.task  # what stop() cancels: the generation, not the handler
            registry[run.response_id] = run
        async for message in messages:
            yield run.add(run.builder.feed(message))
    except (asyncio.CancelledError, GeneratorExit):
        if run.stored and not run.deleted:
            # The client left mid-stream: what was made is stored as failed
            # now (in a task: this one is being cancelled), not left to
            # wait for its lease to expire.
            _ending(run, ClientDisconnectedError(_LEFT))
        raise
    finally:
        registry.pop(run.response_id, None)
        if pump is not None:
            pump.close()


_LEFT = "The client disconnected before the response was complete."
_DELETED = "This response was deleted while it was running."
_ENDINGS: set[asyncio.Task[Any]] = set()  # referenced until done


def _ending(run: ResponseRun, error: NeuraxisError) -> None:
    async def end() -> None:
        try:
            await run.end(error)
        except Exception:
            log.exception("could not end the response", extra={"request_id": run.response_id})

    task = asyncio.get_running_loop().create_task(end())
    _ENDINGS.add(task)
    task.add_done_callback(_ENDINGS.discard)


def stream(
    run: ResponseRun, first: pb.GenerateResponse, rest: Stream, registry: Registry | None = None
) -> AsyncIterator[bytes]:
    """A streamed response, framed at the edge (kept in `registry` while it
    runs, when it is stored)."""
    events = _events(run, first, rest, {} if registry is None else registry)
    return sse(events, _Framing(run), run.response_id)


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
        if run.deleted:
            raise  # stopped: nothing to store
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
        error = InternalError(unexpected_message(run.response_id))
    # A StoreWriteError is logged and counted by save; the lease runs out
    # and an instance marks the response failed once the store takes writes.
    with contextlib.suppress(StoreWriteError):
        await run.end(error)


async def cancel(run: ResponseRun) -> None:
    """Cancel a background response running here: the task's cancellation
    aborts the generation in the neuron; the run stores it as cancelled."""
    if run.task is None:
        return
    run.cancel_requested = True
    run.task.cancel()
    await asyncio.gather(run.task, return_exceptions=True)


_RESTARTED = "cortex restarted while this response was running"


async def fail_orphans(store: ResponseStore, owner: str, recorder: Recorder) -> int:
    """At start-up: background responses this instance was running when it
    died end as failed (their open items closed, as for any failure),
    instead of staying in progress forever."""
    orphans = await store.running(owner)
    for record in orphans:
        await fail(store, record, UnavailableError(_RESTARTED), recorder)
    return len(orphans)


async def fail_dead_siblings(store: ResponseStore, instance: str, recorder: Recorder) -> int:
    """At start-up: the responses of this host:port's processes
    (`host:port/pid`, this host's) that no longer exist end as failed at
    once, without waiting for their leases."""
    prefix = instance.rsplit("/", 1)[0] + "/"
    dead = 0
    for record in await store.running_under(prefix):
        pid = record.owner[len(prefix) :]
        if record.owner != instance and pid.isdigit() and not pid_alive(int(pid)):
            await fail(store, record, UnavailableError(_RESTARTED), recorder)
            dead += 1
    return dead


async def fail(
    store: ResponseStore, record: StoredResponse, error: NeuraxisError, recorder: Recorder
) -> None:
    """End a stored response that nobody runs any more as failed."""
    await ResponseRun.resume(store, record, recorder).end(error)
