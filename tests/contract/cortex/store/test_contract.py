"""The `ResponseStore` contract, run against every backend: SQLite (a file in
a temporary directory) and PostgreSQL (a throwaway local server, one fresh
database per test). Each test speaks only through the interface in
cortex/store/base.py, so a backend that drifts from the others fails here.

What is not here: the Responses API on top of the store (tests/integration/
test_responses.py) and the write latency (bench/responses_vs_chat.py).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from typing import Any

import pytest

from cortex.store.base import ResponseStore, StoredResponse
from cortex.store.postgres import PostgresResponseStore
from cortex.store.sqlite import SqliteResponseStore
from tests.contract.cortex.store import backends

# A factory opening the backend under test; calling it again opens the same
# data (a restarted cortex).
Opener = Callable[[], ResponseStore]


@pytest.fixture
def store_classes() -> tuple[type[ResponseStore], type[ResponseStore]]:
    return SqliteResponseStore, PostgresResponseStore


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
    await backends.close_twice(open_store, lambda used: used.put(_record("resp_a")))
    assert await open_store().get("resp_a") == _record("resp_a")


async def test_an_empty_store_has_nothing(store: ResponseStore) -> None:
    assert await store.get("resp_a") is None
    assert await store.running("a:1") == []
    assert await store.delete("resp_a") is False


async def test_a_deleted_response_is_never_written_again(store: ResponseStore) -> None:
    await store.put(_record("resp_a", status="in_progress", owner="a:1"))
    assert await store.delete("resp_a") is True
    # The run's final save, after the delete: nothing comes back.
    assert await store.put(_record("resp_a", status="completed")) is False
    assert await store.get("resp_a") is None
    assert await store.running("a:1") == []
    assert await store.delete("resp_a") is False


async def test_put_says_it_wrote(store: ResponseStore) -> None:
    assert await store.put(_record("resp_a", status="in_progress")) is True
    assert await store.put(_record("resp_a")) is True


async def test_renew_extends_only_running_leases_of_the_owner(store: ResponseStore) -> None:
    await store.put(_record("resp_p", status="in_progress", owner="a:1/1"))
    await store.put(_record("resp_q", status="queued", owner="a:1/1"))
    await store.put(_record("resp_c", status="completed", owner="a:1/1"))
    await store.put(_record("resp_o", status="in_progress", owner="b:1/1"))
    await store.put(_record("resp_d", status="in_progress", owner="a:1/1"))
    await store.delete("resp_d")
    ids = ["resp_p", "resp_q", "resp_c", "resp_o", "resp_d", "resp_never"]
    assert await store.renew("a:1/1", ids, 500.0) == {"resp_p", "resp_q"}
    p = await store.get("resp_p")
    o = await store.get("resp_o")
    assert p is not None and p.lease_until == 500.0
    assert o is not None and o.lease_until == 0.0
    assert await store.renew("a:1/1", [], 600.0) == set()


async def test_expired_lists_running_responses_past_their_lease(store: ResponseStore) -> None:
    for response_id, status, lease in [
        ("resp_old", "in_progress", 100.0),
        ("resp_q", "queued", 150.0),
        ("resp_live", "in_progress", 300.0),
        ("resp_nolease", "in_progress", 0.0),
        ("resp_done", "failed", 100.0),
    ]:
        record = _record(response_id, status=status, owner="a:1/1")
        await store.put(dataclasses.replace(record, lease_until=lease))
    assert [r.id for r in await store.expired(200.0)] == ["resp_old", "resp_q"]
    assert await store.expired(50.0) == []


async def test_running_under_matches_the_owner_prefix(store: ResponseStore) -> None:
    await store.put(_record("resp_1", status="in_progress", owner="h:80/11", created_at=1))
    await store.put(_record("resp_2", status="queued", owner="h:80/12", created_at=2))
    await store.put(_record("resp_3", status="in_progress", owner="h:800/1"))
    await store.put(_record("resp_4", status="completed", owner="h:80/11"))
    assert [r.id for r in await store.running_under("h:80/")] == ["resp_1", "resp_2"]


async def test_purge_deletes_what_was_created_before_the_cutoff(store: ResponseStore) -> None:
    for i in range(7):
        await store.put(_record(f"resp_old{i}", created_at=100 + i))
    await store.put(_record("resp_gone", created_at=90))
    await store.delete("resp_gone")  # its tombstone goes too
    await store.put(_record("resp_new", created_at=200))
    assert await store.purge(150, batch=3) == 8
    assert await store.get("resp_old0") is None
    assert await store.get("resp_new") == _record("resp_new", created_at=200)
    assert await store.purge(150, batch=3) == 0


async def test_a_job_lease_has_one_holder_until_it_expires(open_store: Opener) -> None:
    one, two = open_store(), open_store()
    assert await one.claim("purge", "a", now=100.0, until=160.0) is True
    assert await two.claim("purge", "b", now=110.0, until=170.0) is False
    assert await one.claim("purge", "a", now=150.0, until=210.0) is True  # renewed
    assert await two.claim("purge", "b", now=200.0, until=260.0) is False
    assert await two.claim("purge", "b", now=220.0, until=280.0) is True  # a's expired
    assert await one.claim("purge", "a", now=230.0, until=290.0) is False
    assert await one.claim("other", "a", now=230.0, until=290.0) is True


async def test_stored_bytes_count_a_tenants_responses_and_fall_with_a_delete(
    store: ResponseStore,
) -> None:
    assert await store.stored_bytes("acme") == 0
    await store.put(_record("resp_small", tenant="acme"))
    small = await store.stored_bytes("acme")
    await store.put(_record("resp_big", tenant="acme", text=secrets.token_hex(10_000)))
    await store.put(_record("resp_other", tenant="other"))
    both = await store.stored_bytes("acme")
    assert small > 0 and both >= small + 10_000  # (PostgreSQL compresses what it can)
    assert await store.stored_bytes() == both + await store.stored_bytes("other")
    assert await store.delete("resp_big")
    assert await store.stored_bytes("acme") < both
