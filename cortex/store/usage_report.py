"""The one reading of the usage ledger: its hour rows grouped into buckets
(an hour, a day, or the whole range) and by the fields asked for, in the
shape of OpenAI's organization usage API (a `page` of `bucket`s, each with
its `results`). `neuraxis usage` and the admin listener's `GET /v1/usage`
both call `usage_page`, so they agree by construction.

Buckets are aligned to their width in UTC (an hour's on the hour, a day's
at midnight); an empty bucket is listed with no results, as OpenAI's are.
Each result carries OpenAI's fields (`input_tokens`, `input_cached_tokens`,
`output_tokens`, `num_model_requests`, and `model` and `api_key_id` when
grouped by them, else null) and ours beside them: `tenant` and `priority`
(grouping fields too), `num_errors`, `total_seconds`, `queue_seconds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from axon.errors import InvalidRequestError
from cortex.store.tenants import HOUR_S, TenantStore, UsageCounts, UsageKey, UsageRow, hour_of

DAY_S = 24 * HOUR_S
BUCKET_WIDTHS = {"1h": HOUR_S, "1d": DAY_S}
# Grouping fields as the API names them, and the ledger's column of each.
GROUP_FIELDS: dict[str, str] = {
    "model": "model",
    "api_key_id": "key_id",
    "tenant": "tenant",
    "priority": "priority",
}
# The most buckets one page holds (a year of days, six weeks of hours).
MAX_BUCKETS = 1000


class UsageQueryError(InvalidRequestError):
    """A query that cannot be answered; `param` names the field at fault."""


@dataclass(frozen=True)
class UsageQuery:
    start: int  # epoch seconds
    end: int  # epoch seconds, exclusive
    bucket_s: int | None = DAY_S  # None: one bucket over the whole range
    group_by: tuple[str, ...] = ()
    tenant: str | None = None
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [g for g in self.group_by if g not in GROUP_FIELDS]
        if unknown:
            raise UsageQueryError(
                f"group_by '{unknown[0]}' is not one of {', '.join(GROUP_FIELDS)}", param="group_by"
            )
        if self.end <= self.start:
            raise UsageQueryError("end_time must be after start_time", param="end_time")
        if self.bucket_s is not None and len(self.bucket_starts()) > MAX_BUCKETS:
            raise UsageQueryError(
                f"the range holds more than {MAX_BUCKETS} buckets: narrow it or use wider buckets",
                param="start_time",
            )

    def bucket_starts(self) -> list[int]:
        """Each bucket's start, the first at or before `start`."""
        if self.bucket_s is None:
            return [hour_of(self.start)]
        first = self.start // self.bucket_s * self.bucket_s
        return list(range(first, self.end, self.bucket_s))

    def bucket_end(self, start: int) -> int:
        return self.end if self.bucket_s is None else start + self.bucket_s


async def usage_page(store: TenantStore, query: UsageQuery) -> dict[str, Any]:
    """The page answering `query` from the ledger in `store`."""
    starts = query.bucket_starts()
    rows = await store.usage(starts[0], query.end, query.tenant, list(query.models) or None)
    return page(rows, query)


def page(rows: Sequence[UsageRow], query: UsageQuery) -> dict[str, Any]:
    """The ledger's hour rows as `query`'s page (pure: `usage_page`'s work)."""
    starts = query.bucket_starts()
    sums: list[dict[tuple[str, ...], UsageCounts]] = [{} for _ in starts]
    for key, counts in rows:
        index = 0 if query.bucket_s is None else (key.hour - starts[0]) // query.bucket_s
        if not 0 <= index < len(starts):
            continue
        group = _group(key, query.group_by)
        sums[index].setdefault(group, UsageCounts()).add(counts)
    data = [
        {
            "object": "bucket",
            "start_time": start,
            "end_time": query.bucket_end(start),
            "results": [
                _result(group, counts, query.group_by) for group, counts in sorted(found.items())
            ],
        }
        for start, found in zip(starts, sums, strict=True)
    ]
    return {"object": "page", "data": data, "has_more": False, "next_page": None}


def _group(key: UsageKey, group_by: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(str(getattr(key, GROUP_FIELDS[g])) for g in group_by)


def _result(
    group: tuple[str, ...], counts: UsageCounts, group_by: tuple[str, ...]
) -> dict[str, Any]:
    fields: dict[str, Any] = dict.fromkeys(GROUP_FIELDS)
    fields.update(zip(group_by, group, strict=True))
    return {
        "object": "organization.usage.completions.result",
        "input_tokens": counts.prompt_tokens,
        "input_cached_tokens": counts.cached_tokens,
        "output_tokens": counts.output_tokens,
        "num_model_requests": counts.requests,
        "num_errors": counts.errors,
        "total_seconds": round(counts.total_s, 6),
        "queue_seconds": round(counts.queue_s, 6),
        **fields,
    }
