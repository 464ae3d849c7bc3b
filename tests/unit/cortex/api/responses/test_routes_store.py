"""The Responses routes' side of the store's upkeep: a replay of a response
whose lease expired ends with response.failed instead of polling forever,
and a deleted response is gone for every route."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from cortex.api.gateway import gateway_of_app
from cortex.api.responses import routes
from cortex.config import CortexSettings
from cortex.store.base import StoredResponse
from cortex.store.sqlite import SqliteResponseStore
from harness import sse
from tests.unit.cortex.api.fakes import ScriptedPool, api_request, client, gateway
from tests.unit.cortex.api.responses.test_routes import END, HI

DEADLINE_S = 10


def _events(text: str) -> list[dict[str, Any]]:
    return sse.body_objects(text)


def _orphan(rid: str, lease_until: float) -> StoredResponse:
    response = {"id": rid, "object": "response", "created_at": 1, "status": "in_progress"}
    response |= {"output": [], "usage": None, "error": None, "model": "m", "background": True}
    events = [
        {"type": "response.created", "sequence_number": 0, "response": response},
        {"type": "response.in_progress", "sequence_number": 1, "response": response},
    ]
    return StoredResponse(
        rid, 1, None, response, [], events=events, owner="gone:1/1", lease_until=lease_until
    )


async def test_a_replay_of_a_run_whose_lease_expired_ends_failed(tmp_path: Path) -> None:
    store = SqliteResponseStore(tmp_path / "r.sqlite3")
    request = api_request(gateway(ScriptedPool([]), store))
    try:
        await store.put(_orphan("resp_gone", time.time() - 1))
        record = await store.get("resp_gone")
        assert record is not None
        replay = routes._replay(request, record, -1)
        frames = await asyncio.wait_for(_all(replay), DEADLINE_S)
        stored = await store.get("resp_gone")
    finally:
        await store.close()
    events = _events(b"".join(frames).decode())
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert stored is not None and stored.status == "failed"
    assert "lease" in stored.response["error"]["message"]


async def _all(frames: AsyncIterator[bytes]) -> list[bytes]:
    return [f async for f in frames]


def test_a_deleted_response_is_gone_for_every_route() -> None:
    c, _ = client([HI, END])
    with c:
        rid = c.post("/v1/responses", json={"model": "m", "input": "Hello"}).json()["id"]
        assert c.delete(f"/v1/responses/{rid}").json()["deleted"] is True
        codes = [
            c.get(f"/v1/responses/{rid}").status_code,
            c.get(f"/v1/responses/{rid}?stream=true").status_code,
            c.get(f"/v1/responses/{rid}/input_items").status_code,
            c.delete(f"/v1/responses/{rid}").status_code,
        ]
    assert codes == [404, 404, 404, 404]


def test_each_process_owns_its_runs_under_its_own_instance_id() -> None:
    """Each worker of `--workers N` makes its own app: host:port/pid."""
    c, _ = client([HI, END])
    assert isinstance(c.app, FastAPI)
    instance = gateway_of_app(c.app).runs.instance
    assert instance.endswith(f":{CortexSettings().port}/{os.getpid()}")
