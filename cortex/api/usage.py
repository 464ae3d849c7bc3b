"""GET /v1/usage on the admin listener: the usage ledger in the shape of
OpenAI's organization usage API (cortex/store/usage_report.py, the same
query `neuraxis usage` runs).

Query parameters, as OpenAI's: `start_time` (epoch seconds, required),
`end_time` (default: now), `bucket_width` (1h or 1d, default 1d),
`group_by` (model, api_key_id, and ours: tenant, priority; repeated or
comma-separated), `models` (the same); and ours: `tenant`. The ledger is
written every [tenancy] ledger_flush_s, so the current bucket runs up to
that far behind.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request

from axon.errors import InvalidRequestError, NotFoundError
from cortex.store.tenants import TenantStore
from cortex.store.usage_report import BUCKET_WIDTHS, UsageQuery, UsageQueryError, usage_page


def router_for(store: TenantStore | None) -> APIRouter:
    """The route over the tenant store (None: no ledger to read)."""
    router = APIRouter()

    @router.get("/v1/usage")
    async def usage(request: Request) -> dict[str, Any]:
        if store is None:
            raise NotFoundError("This cortex keeps no usage ledger ([tenancy] ledger).")
        params = request.query_params
        query = query_of({k: params.getlist(k) for k in params}, int(time.time()))
        return await usage_page(store, query)

    return router


def query_of(params: Mapping[str, Sequence[str]], now: int) -> UsageQuery:
    """The query the parameters ask for (each name with its values), or a 400."""
    start = _epoch(params, "start_time")
    if start is None:
        raise InvalidRequestError("start_time is required (epoch seconds)", param="start_time")
    end = _epoch(params, "end_time")
    width = _one(params, "bucket_width") or "1d"
    if width not in BUCKET_WIDTHS:
        raise InvalidRequestError("bucket_width must be 1h or 1d", param="bucket_width")
    try:
        return UsageQuery(
            start=start,
            end=end if end is not None else now,
            bucket_s=BUCKET_WIDTHS[width],
            group_by=_listed(params, "group_by"),
            tenant=_one(params, "tenant"),
            models=_listed(params, "models"),
        )
    except UsageQueryError as e:
        raise InvalidRequestError(str(e), param=e.param) from None


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name) or params.get(f"{name}[]") or []
    return values[-1] if values else None


def _listed(params: Mapping[str, Sequence[str]], name: str) -> tuple[str, ...]:
    values = [*params.get(name, []), *params.get(f"{name}[]", [])]
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def _epoch(params: Mapping[str, Sequence[str]], name: str) -> int | None:
    value = _one(params, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidRequestError(f"{name} must be epoch seconds", param=name) from None
