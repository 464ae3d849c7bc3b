"""`neuraxis usage`: the usage ledger in the store cortex uses (as `keys`:
the state directory's SQLite file, or PostgreSQL), by hour, day, model or
key, as a table, JSON (the page `GET /v1/usage` on cortex's admin listener
answers: the same query, cortex/store/usage_report.py) or CSV.

cortex writes the ledger every [tenancy] ledger_flush_s (2 s by default),
so the last seconds may not be in it yet.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any

from cortex.store.tenants import open_tenant_store
from cortex.store.usage_report import BUCKET_WIDTHS, UsageQuery, UsageQueryError, usage_page
from neuraxis.commands.keys import own_state_file
from neuraxis.commands.shared import (
    Help,
    Subparsers,
    UsageError,
    add_command,
    add_store_options,
    store_settings,
)

# What --by groups by: the bucket width (None: the whole range) and the fields.
BY: dict[str, tuple[int | None, tuple[str, ...]]] = {
    "hour": (BUCKET_WIDTHS["1h"], ()),
    "day": (BUCKET_WIDTHS["1d"], ()),
    "model": (None, ("model",)),
    "key": (None, ("tenant", "api_key_id")),
}
_UNITS = {"m": 60, "h": 3600, "d": 86_400}
_COLUMNS = (
    ("REQUESTS", "num_model_requests"),
    ("INPUT", "input_tokens"),
    ("CACHED", "input_cached_tokens"),
    ("OUTPUT", "output_tokens"),
    ("ERRORS", "num_errors"),
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help(
        "show what tenants used",
        "The usage ledger: requests and tokens by hour, day, model or key.",
    )
    parser = add_command(sub, "usage", text)
    parser.add_argument("--tenant", help="one tenant's usage only")
    parser.add_argument("--model", action="append", help="one model's usage only (repeatable)")
    parser.add_argument(
        "--since",
        type=_duration,
        default=7 * 86_400,
        help="how far back: 30m, 12h, 7d (default 7d)",
    )
    parser.add_argument("--by", choices=BY, default="day", help="how to group (default day)")
    parser.add_argument(
        "--format", choices=("table", "json", "csv"), default="table", help="default table"
    )
    add_store_options(parser)
    return parser


def _duration(text: str) -> int:
    found = re.fullmatch(r"(\d+)([mhd])", text.strip())
    if found is None or int(found[1]) == 0:
        raise argparse.ArgumentTypeError(f"{text} is not a duration like 30m, 12h or 7d")
    return int(found[1]) * _UNITS[found[2]]


def query_for(args: argparse.Namespace, now: int) -> UsageQuery:
    bucket_s, group_by = BY[args.by]
    return UsageQuery(
        start=now - args.since,
        end=now + 1,  # the current second's requests included
        bucket_s=bucket_s,
        group_by=group_by,
        tenant=args.tenant,
        models=tuple(args.model or ()),
    )


def run(args: argparse.Namespace) -> int:
    settings = store_settings(args)
    own_state_file(settings)
    try:
        query = query_for(args, int(time.time()))
    except UsageQueryError as e:
        raise UsageError(f"{e} (--since, --by)") from None

    async def read() -> dict[str, Any]:
        store = open_tenant_store(settings.store.state_dir, settings.store.postgres_dsn)
        try:
            return await usage_page(store, query)
        finally:
            await store.close()

    page = asyncio.run(read())
    if args.format == "json":
        print(json.dumps(page, indent=2))
        return 0
    rows = table_rows(page, args.by)
    if args.format == "csv":
        csv.writer(sys.stdout, lineterminator="\n").writerows(rows)
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def table_rows(page: dict[str, Any], by: str) -> list[list[str]]:
    """The page as rows, the header first: a row per result (empty buckets
    left out), led by its bucket's start or its group."""
    _, group_by = BY[by]
    lead = [g.upper().replace("API_KEY_ID", "KEY") for g in group_by] or ["START"]
    rows = [[*lead, *(name for name, _ in _COLUMNS)]]
    for bucket in page["data"]:
        for result in bucket["results"]:
            led = [str(result[g]) for g in group_by] or [_when(bucket["start_time"], by)]
            rows.append([*led, *(str(result[field]) for _, field in _COLUMNS)])
    return rows


def _when(epoch: int, by: str) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%d" if by == "day" else "%Y-%m-%dT%H:00Z")
