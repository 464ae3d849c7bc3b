"""The usage ledger's writer on a real SQLite store: requests added in
memory, written by a flush as one set of rows that add to what is stored,
kept for the next flush when one fails, and flushed once more when its
task is cancelled at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from cortex.store.ledger import Ledger
from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import HOUR_S, UsageCounts, UsageKey

KEY = UsageKey("acme", "key_a", "m1", "default", 5 * HOUR_S)


class Flaky(SqliteTenantStore):
    """Fails the next `failures` flushes, as a store that is briefly away."""

    failures = 0

    async def add_usage(self, rows: Mapping[UsageKey, UsageCounts]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("store away")
        await super().add_usage(rows)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Flaky]:
    opened = Flaky(tmp_path / "responses.sqlite3")
    yield opened
    await opened.close()


def _one(prompt: int = 10) -> UsageCounts:
    return UsageCounts(1, prompt, 1, 5, 0, 0.5, 0.0)


async def _rows(store: Flaky) -> dict[UsageKey, UsageCounts]:
    return dict(await store.usage(0, 100 * HOUR_S))


async def test_a_flush_writes_the_sums_and_the_next_adds_to_them(store: Flaky) -> None:
    ledger = Ledger(store, flush_s=2.0)
    for prompt in (10, 20, 30):
        ledger.add(KEY, _one(prompt))
    assert await _rows(store) == {}  # nothing written on the request's path
    await ledger.flush()
    assert await _rows(store) == {KEY: UsageCounts(3, 60, 3, 15, 0, 1.5, 0.0)}
    ledger.add(KEY, _one(40))
    await ledger.flush()
    await ledger.flush()  # nothing new: nothing added twice
    assert (await _rows(store))[KEY].prompt_tokens == 100


async def test_a_failed_flush_keeps_its_counts_for_the_next(store: Flaky) -> None:
    ledger = Ledger(store, flush_s=2.0)
    ledger.add(KEY, _one(10))
    store.failures = 1
    with pytest.raises(ConnectionError):
        await ledger.flush()
    ledger.add(KEY, _one(20))
    await ledger.flush()
    assert (await _rows(store))[KEY].requests == 2
    assert (await _rows(store))[KEY].prompt_tokens == 30


async def test_cancelling_its_task_flushes_what_is_left(store: Flaky) -> None:
    ledger = Ledger(store, flush_s=3600.0)
    task = asyncio.create_task(ledger.forever())
    await asyncio.sleep(0)  # the task is sleeping until its first flush
    ledger.add(KEY, _one())
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert (await _rows(store))[KEY].requests == 1
