"""The store's upkeep on a real SQLite store with a fake clock: leases
renewed (and runs whose row is gone stopped), expired leases ended as
failed, retention purged by one holder of the job at a time."""

from __future__ import annotations

import os
import subprocess

from cortex import metrics
from cortex.api.responses import run as runs
from cortex.api.responses.upkeep import Upkeep
from cortex.api.responses.upkeep_settings import UpkeepSettings
from cortex.recording import PrometheusRecorder
from cortex.store.base import ResponseStore, StoredResponse
from harness.clock import ManualClock as Clock
from tests.unit.cortex.api.responses import scripted

ME = "host:1/7"
DAY = 86_400


def _upkeep(
    store: ResponseStore,
    clock: Clock,
    local: list[runs.ResponseRun] | None = None,
    instance: str = ME,
    ttl_days: float = 30,
) -> Upkeep:
    settings = UpkeepSettings(ttl_days=ttl_days, purge_interval_s=60, lease_s=30)
    return Upkeep(
        store, instance, lambda: local or [], settings, clock, recorder=PrometheusRecorder()
    )


async def _running(store: ResponseStore, rid: str, clock: Clock) -> runs.ResponseRun:
    run = scripted.response_run(
        store, rid, owner=ME, background=True, lease_s=30, created=int(clock.now), clock=clock
    )
    run.add(run.builder.start())
    run.add(run.builder.feed(scripted.text("Par")))
    await run.save()
    return run


async def test_renew_extends_the_lease_and_stops_runs_whose_row_is_gone(
    store: ResponseStore,
) -> None:
    clock = Clock()
    kept, deleted = await _running(store, "resp_k", clock), await _running(store, "resp_d", clock)
    await store.delete("resp_d")
    clock.now += 20
    assert await _upkeep(store, clock, [kept, deleted]).renew() == 1
    record = await store.get("resp_k")
    assert record is not None and record.lease_until == clock.now + 30
    assert deleted.deleted and not kept.deleted


async def test_an_expired_lease_ends_the_response_failed(store: ResponseStore) -> None:
    clock = Clock()
    await _running(store, "resp_1", clock)
    before = metrics.EXPIRED_LEASES.labels("sqlite")._value.get()
    other = _upkeep(store, clock, instance="host:2/9")
    clock.now += 29
    assert await other.expire() == 0  # still within its lease
    clock.now += 2
    assert await other.expire() == 1
    record = await store.get("resp_1")
    assert record is not None and record.status == "failed"
    assert "lease" in record.response["error"]["message"]
    assert record.response["output"][0]["status"] == "incomplete"
    assert record.events[-1]["type"] == "response.failed"
    assert metrics.EXPIRED_LEASES.labels("sqlite")._value.get() == before + 1
    assert await other.expire() == 0


def _old(rid: str, created_at: float) -> StoredResponse:
    return StoredResponse(rid, int(created_at), None, {"id": rid, "status": "completed"}, [])


async def test_purge_deletes_past_the_ttl_by_one_holder_at_a_time(store: ResponseStore) -> None:
    clock = Clock()
    await store.put(_old("resp_old", clock.now - 31 * DAY))
    await store.put(_old("resp_new", clock.now - 29 * DAY))
    one, two = _upkeep(store, clock, instance="a:1/1"), _upkeep(store, clock, instance="b:1/1")
    purged = metrics.PURGED_RESPONSES.labels("sqlite")._value.get()
    assert await one.purge() == 1
    assert metrics.PURGED_RESPONSES.labels("sqlite")._value.get() == purged + 1
    await store.put(_old("resp_old2", clock.now - 40 * DAY))
    assert await two.purge() == 0  # one holds the job
    assert await store.get("resp_old2") is not None
    assert await one.purge() == 1
    assert await store.get("resp_new") is not None
    clock.now += 2 * 60 + 1  # one stopped: its job lease lapses, two takes over
    await store.put(_old("resp_old3", clock.now - 31 * DAY))
    assert await two.purge() == 1


async def test_a_ttl_of_zero_keeps_responses_forever(store: ResponseStore) -> None:
    clock = Clock()
    await store.put(_old("resp_old", clock.now - 3650 * DAY))
    assert await _upkeep(store, clock, ttl_days=0).purge() == 0
    assert await store.get("resp_old") is not None


async def test_at_start_the_runs_of_dead_processes_of_this_address_fail(
    store: ResponseStore,
) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    clock = Clock()
    for rid, owner in [
        ("resp_dead", f"host:1/{dead.pid}"),
        ("resp_alive", f"host:1/{os.getpid()}"),
        ("resp_elsewhere", f"host:2/{dead.pid}"),
    ]:
        run = await _running(store, rid, clock)
        run.owner = owner
        await run.save()
    assert await runs.fail_dead_siblings(store, "host:1/424242", PrometheusRecorder()) == 1
    statuses = {
        rid: (await store.get(rid)) for rid in ("resp_dead", "resp_alive", "resp_elsewhere")
    }
    assert {rid: r.status for rid, r in statuses.items() if r} == {
        "resp_dead": "failed",
        "resp_alive": "in_progress",
        "resp_elsewhere": "in_progress",
    }
