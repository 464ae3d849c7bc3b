"""The run of a response against a real SQLite store and scripted neuron
streams: foreground (streamed or not), background, cancel and orphan
recovery all end through the builder and are stored before they are told."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.types import Message, Scope

from axon.errors import ContextLengthExceededError
from axon.v1 import neuron_pb2 as pb
from cortex.api.responses import run as runs
from cortex.recording import PrometheusRecorder
from cortex.store.base import ResponseStore, StoredResponse
from cortex.store.sqlite import SqliteResponseStore
from tests.unit.cortex.api.responses import scripted

DEADLINE_S = 10


def _request() -> Request:
    async def receive() -> Message:
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    scope: Scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "app": None}
    return Request(scope, receive)


async def _stored(store: ResponseStore, rid: str = "resp_1") -> StoredResponse:
    record = await store.get(rid)
    assert record is not None
    return record


async def test_non_streamed_response_is_stored_completed(store: ResponseStore) -> None:
    run = scripted.response_run(store)
    await runs.complete(
        _request(), run, scripted.text("Pa"), scripted.stream(scripted.text("ris"), scripted.END)
    )
    record = await _stored(store)
    assert record.status == "completed"
    assert record.response["output"][0]["content"][0]["text"] == "Paris"
    assert [e["sequence_number"] for e in record.events] == list(range(len(record.events)))
    assert record.events[-1]["type"] == "response.completed"


async def test_streamed_response_frames_typed_events_and_stores_them(
    store: ResponseStore,
) -> None:
    run = scripted.response_run(store)
    frames = [
        f
        async for f in runs.stream(
            run, scripted.text("Pa"), scripted.stream(scripted.text("ris"), scripted.END)
        )
    ]
    events = scripted.parse(frames)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert (await _stored(store)).events == events


async def test_context_length_failure_mid_stream_carries_its_code(store: ResponseStore) -> None:
    run = scripted.response_run(store)
    failing = scripted.stream(ContextLengthExceededError("too long"))
    events = scripted.parse([f async for f in runs.stream(run, scripted.text("Pa"), failing)])
    assert events[-1]["type"] == "response.failed"
    error = events[-1]["response"]["error"]
    assert error == {"code": "invalid_prompt", "message": "too long"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"
    assert (await _stored(store)).status == "failed"


async def test_unexpected_failure_is_logged_and_ends_as_server_error(
    store: ResponseStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = scripted.response_run(store, "resp_x")
    with caplog.at_level(logging.ERROR, logger="neuraxis.cortex"):
        frames = [
            f async for f in runs.stream(run, scripted.text("a"), scripted.stream(KeyError("boom")))
        ]
    last = scripted.parse(frames)[-1]
    assert last["type"] == "response.failed"
    assert last["response"]["error"]["code"] == "server_error"
    assert any(getattr(r, "request_id", None) == "resp_x" for r in caplog.records if r.exc_info)


class _Unwritable(SqliteResponseStore):
    async def put(self, record: StoredResponse) -> bool:
        raise OSError("disk full")


async def test_a_store_that_fails_still_ends_the_stream(tmp_path: Path) -> None:
    store = _Unwritable(tmp_path / "r.sqlite3")
    frames = [
        f
        async for f in runs.stream(
            scripted.response_run(store), scripted.text("a"), scripted.stream(scripted.END)
        )
    ]
    await store.close()
    last = scripted.parse(frames)[-1]
    # The response's own terminal event (issue 13 point 6), not the last-resort `error`.
    assert last["type"] == "response.failed"
    assert last["response"]["error"]["code"] == "server_error"


async def _wait_status(store: ResponseStore, statuses: set[str]) -> StoredResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while loop.time() < deadline:
        record = await store.get("resp_1")
        if record is not None and record.status in statuses:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"no status in {statuses}")


async def test_background_failure_on_context_length_is_stored_with_its_code(
    store: ResponseStore,
) -> None:
    background: dict[str, runs.ResponseRun] = {}
    run = scripted.response_run(store, owner="host:1")
    await runs.start_background(
        run, scripted.stream(ContextLengthExceededError("too long")), background
    )
    assert run.task is not None
    await run.task
    record = await _stored(store)
    assert record.status == "failed" and record.owner == "host:1"
    assert record.response["error"]["code"] == "invalid_prompt"
    assert [e["type"] for e in record.events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert background == {}


async def test_background_completes_and_leaves_the_table(store: ResponseStore) -> None:
    background: dict[str, runs.ResponseRun] = {}
    run = scripted.response_run(store)
    await runs.start_background(run, scripted.stream(scripted.text("Hi"), scripted.END), background)
    assert (await _stored(store)).response["background"] is True
    assert run.task is not None
    await run.task
    assert (await _stored(store)).status == "completed" and background == {}


async def test_cancel_ends_open_items_as_incomplete(store: ResponseStore) -> None:
    fed = asyncio.Event()

    async def endless() -> AsyncIterator[pb.GenerateResponse]:
        yield scripted.text("Par")
        fed.set()
        await asyncio.Event().wait()
        yield scripted.END

    background: dict[str, runs.ResponseRun] = {}
    run = scripted.response_run(store)
    await runs.start_background(run, endless(), background)
    await asyncio.wait_for(fed.wait(), DEADLINE_S)
    await runs.cancel(run)
    record = await _wait_status(store, {"cancelled"})
    assert record.response["output"][0]["status"] == "incomplete"


async def test_orphans_end_through_the_builder(store: ResponseStore) -> None:
    """A response cut off mid-generation: its open message is closed (with
    the text streamed so far) and it ends with response.failed, numbered
    after the stored events."""
    run = scripted.response_run(store, owner="host:1")
    run.builder.fields["background"] = True
    run.add(run.builder.start())
    run.add(run.builder.feed(scripted.text("Par")))
    run.add(run.builder.feed(scripted.text("is")))
    await run.save()  # as the crashed instance left it

    assert await runs.fail_orphans(store, "host:1", PrometheusRecorder()) == 1
    record = await _stored(store)
    (item,) = record.response["output"]
    assert item["status"] == "incomplete" and item["content"][0]["text"] == "Paris"
    assert record.status == "failed" and "restarted" in record.response["error"]["message"]
    assert record.response["error"]["code"] == "server_error"
    kinds = [e["type"] for e in record.events]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    assert [e["sequence_number"] for e in record.events] == list(range(len(record.events)))
    assert await store.running("host:1") == []
