"""The ledger's one reading, pure: hour rows into aligned buckets (hour,
day, the whole range) and groups, OpenAI's page shape, empty buckets kept,
and queries refused with the parameter at fault."""

from __future__ import annotations

import pytest

from cortex.store.tenants import HOUR_S, UsageCounts, UsageKey, UsageRow
from cortex.store.usage_report import DAY_S, UsageQuery, UsageQueryError, page

DAY = 20_000 * DAY_S  # a UTC midnight


def _row(hour: int, model: str = "m1", key: str = "key_a", requests: int = 1) -> UsageRow:
    counts = UsageCounts(requests, 10 * requests, requests, 5 * requests, 0, 0.5, 0.0)
    return UsageKey("acme", key, model, "default", DAY + hour * HOUR_S), counts


ROWS = [_row(0), _row(1, "m2"), _row(1), _row(25, key="key_b", requests=2)]


def test_day_buckets_sum_their_hours_and_keep_empty_days() -> None:
    query = UsageQuery(DAY + 5, DAY + 3 * DAY_S, bucket_s=DAY_S)
    got = page(ROWS, query)
    assert (got["object"], got["has_more"], got["next_page"]) == ("page", False, None)
    assert [(b["start_time"], b["end_time"]) for b in got["data"]] == [
        (DAY + i * DAY_S, DAY + (i + 1) * DAY_S) for i in range(3)
    ]
    (first,), (second,), third = (b["results"] for b in got["data"])
    assert (first["num_model_requests"], first["input_tokens"], first["output_tokens"]) == (
        3,
        30,
        15,
    )
    assert first["input_cached_tokens"] == 3 and first["model"] is None
    assert second["num_model_requests"] == 2 and third == []
    assert first["object"] == "organization.usage.completions.result"


def test_hour_buckets_grouped_by_model() -> None:
    query = UsageQuery(DAY, DAY + 2 * HOUR_S, bucket_s=HOUR_S, group_by=("model",))
    got = page(ROWS, query)
    assert [[(r["model"], r["num_model_requests"]) for r in b["results"]] for b in got["data"]] == [
        [("m1", 1)],
        [("m1", 1), ("m2", 1)],
    ]


def test_one_bucket_over_the_range_grouped_by_key_and_tenant() -> None:
    query = UsageQuery(DAY, DAY + 2 * DAY_S, bucket_s=None, group_by=("tenant", "api_key_id"))
    (bucket,) = page(ROWS, query)["data"]
    assert (bucket["start_time"], bucket["end_time"]) == (DAY, DAY + 2 * DAY_S)
    got = [(r["tenant"], r["api_key_id"], r["num_model_requests"]) for r in bucket["results"]]
    assert got == [("acme", "key_a", 3), ("acme", "key_b", 2)]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"group_by": ("colour",)}, "group_by"),
        ({"end": DAY}, "end_time"),
        ({"end": DAY + 2000 * HOUR_S, "bucket_s": HOUR_S}, "start_time"),
    ],
)
def test_unanswerable_queries_name_their_parameter(fields: dict[str, object], param: str) -> None:
    arguments: dict[str, object] = {"start": DAY, "end": DAY + DAY_S, **fields}
    with pytest.raises(UsageQueryError) as refused:
        UsageQuery(**arguments)  # type: ignore[arg-type]
    assert refused.value.param == param
