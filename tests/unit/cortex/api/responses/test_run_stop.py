"""A run stopped because its response was deleted (streamed or background:
the generation is aborted and the row never comes back), and a store that
fails while a stream runs (the stream still ends with response.failed, and
the failure is counted). Real SQLite store, scripted neuron streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from axon.v1 import neuron_pb2 as pb
from cortex import metrics
from cortex.api.responses import run as runs
from cortex.store.base import ResponseStore, StoredResponse
from cortex.store.postgres import PostgresResponseStore
from cortex.store.sqlite import SqliteResponseStore
from harness.ports import free_port
from tests.unit.cortex.api.responses import scripted

DEADLINE_S = 10


def _run(store: ResponseStore, *, background: bool = False) -> runs.ResponseRun:
    return scripted.response_run(store, owner="host:1/7", background=background, lease_s=30)


class Endless:
    """A neuron stream that sends one token, then waits for ever; records
    whether it was aborted (the gRPC call's cancellation)."""

    def __init__(self, then: asyncio.Event | None = None) -> None:
        self.fed = asyncio.Event()
        self.aborted = asyncio.Event()
        self._then = then

    async def __call__(self) -> AsyncIterator[pb.GenerateResponse]:
        try:
            yield scripted.text("Par")
            self.fed.set()
            await (self._then or asyncio.Event()).wait()
            yield scripted.END
        except asyncio.CancelledError:
            self.aborted.set()
            raise


async def test_delete_stops_a_streamed_run_and_it_never_comes_back(store: ResponseStore) -> None:
    registry: runs.Registry = {}
    neuron = Endless()
    run = _run(store)

    async def read() -> list[bytes]:
        return [f async for f in runs.stream(run, scripted.text("P"), neuron(), registry)]

    reader = asyncio.create_task(read())
    await asyncio.wait_for(neuron.fed.wait(), DEADLINE_S)
    assert registry == {"resp_1": run}
    assert await store.get("resp_1") is not None  # stored while it runs: it can be deleted
    assert await store.delete("resp_1") is True
    run.stop()
    frames = await asyncio.wait_for(reader, DEADLINE_S)
    assert neuron.aborted.is_set()
    events = scripted.parse(frames)
    assert events[-1]["type"] == "response.failed"
    assert "deleted" in events[-1]["response"]["error"]["message"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert registry == {}
    assert await store.get("resp_1") is None


async def _delete_while_running(
    store: ResponseStore, neuron: Endless, end: Callable[[runs.ResponseRun], None]
) -> runs.Registry:
    """A background run on `neuron` whose response is deleted once the
    neuron is fed; `end` then lets the run finish, which it is waited for.
    The background registry after."""
    background: runs.Registry = {}
    run = _run(store, background=True)
    await runs.start_background(run, neuron(), background)
    await asyncio.wait_for(neuron.fed.wait(), DEADLINE_S)
    assert await store.delete("resp_1") is True
    end(run)
    assert run.task is not None
    await asyncio.wait_for(asyncio.gather(run.task, return_exceptions=True), DEADLINE_S)
    return background


async def test_delete_stops_a_background_run(store: ResponseStore) -> None:
    neuron = Endless()
    background = await _delete_while_running(store, neuron, lambda run: run.stop())
    assert neuron.aborted.is_set()
    assert background == {}
    assert await store.get("resp_1") is None


async def test_a_run_deleted_elsewhere_is_not_stored_again(store: ResponseStore) -> None:
    """Deleted by another worker or instance: the run's final save brings
    nothing back."""
    release = asyncio.Event()
    await _delete_while_running(store, Endless(then=release), lambda _run: release.set())
    assert await store.get("resp_1") is None


class _FailsAfter(SqliteResponseStore):
    """A store whose disk fills up after `ok` writes."""

    def __init__(self, path: Path, ok: int) -> None:
        super().__init__(path)
        self.ok = ok

    async def put(self, record: StoredResponse) -> bool:
        if self.ok <= 0:
            raise OSError("No space left on device")
        self.ok -= 1
        return await super().put(record)


def _store_errors(backend: str) -> float:
    value: float = metrics.STORE_ERRORS.labels(backend, "put")._value.get()
    return value


async def _failed_stream(store: ResponseStore) -> list[dict[str, Any]]:
    """The events of a foreground run on `store` (closed after it), which
    must end the stream failed with a server error."""
    try:
        frames = [
            f
            async for f in runs.stream(
                _run(store), scripted.text("Pa"), scripted.stream(scripted.END)
            )
        ]
    finally:
        await store.close()
    events = scripted.parse(frames)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    return events


async def test_a_store_failing_at_the_end_ends_the_stream_failed_and_counted(
    tmp_path: Path,
) -> None:
    store = _FailsAfter(tmp_path / "r.sqlite3", ok=1)  # the row at the start, then full
    before = _store_errors("sqlite")
    events = await _failed_stream(store)
    # The completion that could not be stored was never sent: no gap.
    assert "response.completed" not in [e["type"] for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert _store_errors("sqlite") > before


async def test_a_background_run_whose_store_fails_keeps_its_lease_to_expire(
    tmp_path: Path,
) -> None:
    store = _FailsAfter(tmp_path / "r.sqlite3", ok=2)  # queued, in_progress, then full
    background: runs.Registry = {}
    run = _run(store, background=True)
    try:
        await runs.start_background(
            run, scripted.stream(scripted.text("Hi"), scripted.END), background
        )
        assert run.task is not None
        await asyncio.wait_for(run.task, DEADLINE_S)  # ends without raising
        record = await store.get("resp_1")
    finally:
        await store.close()
    assert record is not None and record.status == "in_progress" and record.lease_until > 0


async def test_a_client_leaving_mid_stream_ends_the_stored_response_failed(
    store: ResponseStore,
) -> None:
    """Not left in progress until its lease expires: stored failed at once,
    with what was made so far, and the generation aborted."""
    registry: runs.Registry = {}
    neuron = Endless()
    run = _run(store)

    async def read() -> None:
        async for _ in runs.stream(run, scripted.text("P"), neuron(), registry):
            pass

    reader = asyncio.create_task(read())
    await asyncio.wait_for(neuron.fed.wait(), DEADLINE_S)
    reader.cancel()  # what CancelOnDisconnect does when the client leaves
    await asyncio.gather(reader, return_exceptions=True)
    await asyncio.wait_for(neuron.aborted.wait(), DEADLINE_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    record = await store.get("resp_1")
    while record is not None and record.status == "in_progress" and loop.time() < deadline:
        await asyncio.sleep(0.01)
        record = await store.get("resp_1")
    assert record is not None and record.status == "failed"
    assert "disconnected" in record.response["error"]["message"]
    assert record.response["output"][0]["content"][0]["text"] == "PPar"
    assert registry == {}


async def test_postgresql_down_ends_the_stream_failed_and_counted() -> None:
    """A real client against a PostgreSQL that is not there (nothing listens
    on the port): the stream still ends with response.failed."""
    store = PostgresResponseStore(f"postgresql://neuraxis@127.0.0.1:{free_port()}/none")
    before = _store_errors("postgres")
    await _failed_stream(store)
    assert _store_errors("postgres") > before
