"""The `ResponseStore` contract, run against every backend: SQLite (a file in
a temporary directory) and PostgreSQL (a throwaway local server, one fresh
database per test). Each test speaks only through the interface in
cortex/store/base.py, so a backend that drifts from the others fails here.

What is not here: the Responses API on top of the store (tests/integration/
test_responses.py) and the write latency (bench/responses_vs_chat.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from cortex.store.base import ResponseStore, StoredResponse
from cortex.store.postgres import PostgresResponseStore
from cortex.store.sqlite import SqliteResponseStore
from tests.postgres import fresh_database

# A factory opening the backend under test; calling it again opens the same
# data (a restarted cortex).
Opener = Callable[[], ResponseStore]


@pytest.fixture(params=["sqlite", "postgres"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    opened: list[ResponseStore] = []
    if request.param == "sqlite":
        path = tmp_path / "responses.sqlite3"

        def make() -> ResponseStore:
            return SqliteResponseStore(path)
    else:
        dsn = await fresh_database(request.getfixturevalue("postgres_dsn"))

        def make() -> ResponseStore:
            return PostgresResponseStore(dsn)

    def opener() -> ResponseStore:
        store = make()
        opened.append(store)
        return store

    yield opener
    for store in opened:
        await store.close()


@pytest.fixture
def store(open_store: Opener) -> ResponseStore:
    return open_store()


def _record(
    response_id: str,
    *,
    status: str = "completed",
    owner: str = "",
    tenant: str = "",
    created_at: int = 1_700_000_000,
    previous: str | None = None,
    events: list[dict[str, Any]] | None = None,
    text: str = "Paris.",
) -> StoredResponse:
    return StoredResponse(
        id=response_id,
        created_at=created_at,
        previous_response_id=previous,
        response={
            "id": response_id,
            "object": "response",
            "status": status,
            "output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": 3, "output_tokens": 2},
        },
        input_items=[
            {
                "id": f"msg_{response_id}",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Capital of France?"}],
            }
        ],
        events=events or [],
        owner=owner,
        tenant=tenant,
    )


async def test_a_stored_response_reads_back_equal(store: ResponseStore) -> None:
    events = [{"type": "response.created", "sequence_number": 0}]
    record = _record(
        "resp_a", previous="resp_before", owner="10.0.0.1:8000", tenant="acme", events=events
    )
    await store.put(record)
    assert await store.get("resp_a") == record


async def test_a_missing_id_reads_as_none(store: ResponseStore) -> None:
    await store.put(_record("resp_a"))
    assert await store.get("resp_b") is None


async def test_text_and_nesting_survive_the_round_trip(store: ResponseStore) -> None:
    text = 'Zürich, 東京, «quotes» "and" \\ backslashes, \u2028 and an emoji 🙂'
    record = _record("resp_u", text=text)
    await store.put(record)
    got = await store.get("resp_u")
    assert got is not None and got.response["output"][0]["content"][0]["text"] == text
    assert got == record


async def test_put_again_replaces_the_whole_record(store: ResponseStore) -> None:
    await store.put(_record("resp_a", status="in_progress", owner="a:1", created_at=1))
    done = _record(
        "resp_a",
        status="completed",
        owner="",
        created_at=2,
        previous="resp_0",
        events=[{"type": "response.completed", "sequence_number": 5}],
        text="Rome.",
    )
    await store.put(done)
    assert await store.get("resp_a") == done
    assert await store.running("a:1") == []


async def test_delete_says_whether_it_existed(store: ResponseStore) -> None:
    await store.put(_record("resp_a"))
    await store.put(_record("resp_b"))
    assert await store.delete("resp_a") is True
    assert await store.get("resp_a") is None
    assert await store.delete("resp_a") is False
    assert await store.delete("resp_never") is False
    assert await store.get("resp_b") == _record("resp_b")


async def test_running_lists_only_the_owners_unfinished_responses(store: ResponseStore) -> None:
    mine = "10.0.0.1:8000"
    for response_id, status, owner in [
        ("resp_q", "queued", mine),
        ("resp_p", "in_progress", mine),
        ("resp_c", "completed", mine),
        ("resp_f", "failed", mine),
        ("resp_x", "cancelled", mine),
        ("resp_o", "in_progress", "10.0.0.2:8000"),
        ("resp_n", "in_progress", ""),
    ]:
        await store.put(_record(response_id, status=status, owner=owner))
    assert sorted(r.id for r in await store.running(mine)) == ["resp_p", "resp_q"]
    assert [r.id for r in await store.running("10.0.0.2:8000")] == ["resp_o"]
    assert await store.running("10.0.0.9:8000") == []


async def test_running_comes_oldest_first(store: ResponseStore) -> None:
    owner = "10.0.0.1:8000"
    for response_id, created_at in [("resp_2", 20), ("resp_3", 30), ("resp_1", 10)]:
        await store.put(_record(response_id, status="queued", owner=owner, created_at=created_at))
    assert [r.id for r in await store.running(owner)] == ["resp_1", "resp_2", "resp_3"]


async def test_events_keep_their_order(store: ResponseStore) -> None:
    # Sequence numbers deliberately not sorted: the store keeps the list as
    # given, it does not reorder by any key.
    events = [{"type": f"e{i}", "sequence_number": (i * 7) % 50} for i in range(50)]
    await store.put(_record("resp_a", events=events))
    got = await store.get("resp_a")
    assert got is not None and got.events == events


async def test_a_put_is_there_after_close_and_reopen(open_store: Opener) -> None:
    first = open_store()
    record = _record("resp_a", status="in_progress", owner="a:1")
    await first.put(record)
    await first.close()
    again = open_store()
    assert await again.get("resp_a") == record
    assert await again.running("a:1") == [record]


async def test_close_is_harmless_unused_or_twice(open_store: Opener) -> None:
    unused = open_store()
    await unused.close()
    used = open_store()
    await used.put(_record("resp_a"))
    await used.close()
    await used.close()
    assert await open_store().get("resp_a") == _record("resp_a")


async def test_an_empty_store_has_nothing(store: ResponseStore) -> None:
    assert await store.get("resp_a") is None
    assert await store.running("a:1") == []
    assert await store.delete("resp_a") is False
