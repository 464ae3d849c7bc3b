"""Each tenant's share of the Responses store (cortex/store/quota.py): on a
real SQLite store and a hand-moved clock, then through the app."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from axon.errors import StoreQuotaError
from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.upkeep_settings import UpkeepSettings
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from cortex.store.base import StoredResponse
from cortex.store.quota import FRESH_S, StoreQuota
from cortex.store.sqlite import SqliteResponseStore
from harness.clock import ManualClock
from harness.polling import wait_until
from tests.unit.cortex.api.fakes import ScriptedPool


def _record(response_id: str, tenant: str, size: int) -> StoredResponse:
    response = {"id": response_id, "status": "completed", "text": "x" * size}
    return StoredResponse(response_id, 1, None, response, [], tenant=tenant)


async def test_a_tenant_over_its_quota_is_refused_until_it_deletes() -> None:
    store = SqliteResponseStore(Path(":memory:"))
    clock = ManualClock(100.0)
    quota = StoreQuota(store, max_bytes=1000, clock=clock)
    try:
        await quota.check("acme")
        await store.put(_record("resp_1", "acme", 2000))
        await quota.check("acme")  # counted a moment ago: not yet seen
        clock.advance(FRESH_S)
        with pytest.raises(StoreQuotaError, match="quota"):
            await quota.check("acme")
        await quota.check("other", adding=1000)  # another tenant's share is its own
        with pytest.raises(StoreQuotaError):  # what it let through counts at once
            await quota.check("other", adding=1)
        await store.delete("resp_1")
        clock.advance(FRESH_S)
        await quota.check("acme")
    finally:
        await store.close()


async def test_no_quota_checks_nothing() -> None:
    store = SqliteResponseStore(Path(":memory:"))
    try:
        await store.put(_record("resp_1", "acme", 2000))
        await StoreQuota(store, max_bytes=0).check("acme")
    finally:
        await store.close()


def test_the_api_answers_429_insufficient_quota_and_still_serves_store_false() -> None:
    done = pb.GenerateResponse(
        choices=[pb.ChoiceDelta(index=0, text="ok", finish_reason=pb.FINISH_REASON_STOP)],
        usage=pb.Usage(prompt_tokens=1, completion_tokens=1),
    )
    settings = CortexSettings(
        store=StoreSettings(state_dir=Path(tempfile.mkdtemp(prefix="neuraxis-test-"))),
        responses=UpkeepSettings(max_stored_bytes_per_tenant=1),
    )
    body = {"model": "m", "input": "hi"}
    with TestClient(create_app(settings, pool=ScriptedPool([done]))) as client:
        statuses: list[int] = []
        errors: list[dict[str, Any]] = []

        def refused() -> bool:
            answer = client.post("/v1/responses", json=body)
            statuses.append(answer.status_code)
            errors.append(answer.json().get("error") or {})
            return answer.status_code == 429

        assert wait_until(refused, 10, interval_s=0.5)
        error = errors[-1]
        assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_quota")
        assert set(statuses[:-1]) <= {200}
        served = client.post("/v1/responses", json={**body, "store": False})
        assert served.status_code == 200, served.text
