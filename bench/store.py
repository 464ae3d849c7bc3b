"""What the Responses store holds up to (issue 13 point 6):

1. Bytes stored for a streamed answer of 1,000 tokens (a sim neuron behind
   a real cortex with its SQLite store): the stored events as they were
   stored before compaction (every event as sent: what `json.dumps` of the
   events took) and as stored now (the `events` column), against the final
   response object (the `response` column).
2. The retention purge: time to delete 100,000 expired responses (plus
   10,000 that stay) through `ResponseStore.purge`, SQLite (a file in a
   temporary directory) and PostgreSQL (a throwaway local server,
   harness/postgres.py). The rows are a typical stored answer (a few hundred
   characters, its compacted events), written in bulk beforehand.

    make bench-store
    python -m bench.store --tokens 1000 --rows 100000
    python -m bench.store --smoke    # 100 tokens, 1,000 rows (make test)
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from cortex.store.base import COLUMNS, ResponseStore, StoredResponse
from cortex.store.postgres import PostgresResponseStore
from cortex.store.sqlite import SqliteResponseStore
from harness.bench_stack import output_path, parser, write_summary
from harness.gateway import sim_gateway
from harness.plots import markdown_table, write_markdown
from harness.postgres import fresh_database, postgres_server

MODEL = "sim-model"
DAY_S = 86_400


@contextmanager
def sim_cortex(logs: Path, state: Path) -> Iterator[str]:
    """A sim neuron (no time between tokens) and a cortex storing in `state`."""
    logs.mkdir(parents=True, exist_ok=True)
    neuron = ["--sim-ttft-s", "0", "--sim-itl-s", "0"]
    with sim_gateway(
        logs,
        "store",
        "--state-dir",
        str(state),
        served_id=MODEL,
        neuron_flags=neuron,
        timeout_s=120,
    ) as running:
        yield running.base_url


def stream_one(base: str, tokens: int) -> str:
    """A streamed, stored response of `tokens` output tokens; its id."""
    body = {"model": MODEL, "input": "Write.", "stream": True, "max_output_tokens": tokens}
    with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=120) as r:
        r.raise_for_status()
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    last = json.loads(lines[-1][6:])
    assert last["type"] in ("response.completed", "response.incomplete"), last
    assert last["response"]["usage"]["output_tokens"] == tokens, last["response"]["usage"]
    return str(last["response"]["id"])


def bytes_stored(tokens: int, logs: Path) -> dict[str, float]:
    state = Path(tempfile.mkdtemp(prefix="neuraxis-bench-store-"))
    with sim_cortex(logs, state) as base:
        response_id = stream_one(base, tokens)
    db = sqlite3.connect(state / "responses.sqlite3")
    row = db.execute(
        f"SELECT {', '.join(COLUMNS)} FROM responses WHERE id = ?", (response_id,)
    ).fetchone()
    db.close()
    record = StoredResponse.from_row(row)
    response, events = len(row[COLUMNS.index("response")].encode()), len(row[7].encode())
    before = len(json.dumps(record.events).encode())  # what was stored before compaction
    return {
        "tokens": float(tokens),
        "events": float(len(record.events)),
        "response_bytes": float(response),
        "events_bytes_before": float(before),
        "events_bytes_after": float(events),
        "ratio_before": before / response,
        "ratio_after": events / response,
    }


def _rows(count: int, created_at: int, prefix: str) -> list[tuple[Any, ...]]:
    """`count` rows of a typical stored answer (compacted events)."""
    text = "The sea is wide and deep. " * 20
    events = [{"type": "response.completed", "sequence_number": 0, "response": {}}]
    rows = []
    for i in range(count):
        rid = f"resp_{prefix}{i}"
        response: dict[str, Any] = {"id": rid, "object": "response", "status": "completed"}
        response |= {"model": MODEL, "output": [{"type": "message", "content": [{"text": text}]}]}
        events[0]["response"] = response
        record = StoredResponse(rid, created_at, None, response, [], events=events)
        rows.append(record.to_row())
    return rows


async def _timed_purge(store: ResponseStore, now: int, expired: int) -> float:
    """How long the store takes to purge what is over 30 days old (all of
    the `expired` rows, checked), then closed."""
    started = time.perf_counter()
    purged = await store.purge(now - 30 * DAY_S)
    seconds = time.perf_counter() - started
    await store.close()
    assert purged == expired, purged
    return seconds


async def purge_sqlite(expired: int, kept: int) -> float:
    path = Path(tempfile.mkdtemp(prefix="neuraxis-bench-purge-")) / "responses.sqlite3"
    store = SqliteResponseStore(path)  # creates the schema
    now = int(time.time())
    db = sqlite3.connect(path)
    marks = ",".join("?" * len(COLUMNS))
    sql = f"INSERT INTO responses ({', '.join(COLUMNS)}) VALUES ({marks})"
    with db:
        db.executemany(sql, _rows(expired, now - 40 * DAY_S, "old"))
        db.executemany(sql, _rows(kept, now, "new"))
    db.close()
    return await _timed_purge(store, now, expired)


async def purge_postgres(dsn: str, expired: int, kept: int) -> float:
    store = PostgresResponseStore(dsn)
    assert await store.get("resp_none") is None  # creates the schema
    now = int(time.time())
    conn = await asyncpg.connect(dsn)
    casts = {"response", "input_items", "events"}
    values = ", ".join(
        f"${i}::jsonb" if c in casts else f"${i}" for i, c in enumerate(COLUMNS, start=1)
    )
    sql = f"INSERT INTO neuraxis_responses ({', '.join(COLUMNS)}) VALUES ({values})"
    await conn.executemany(sql, _rows(expired, now - 40 * DAY_S, "old"))
    await conn.executemany(sql, _rows(kept, now, "new"))
    await conn.execute("ANALYZE neuraxis_responses")
    await conn.close()
    return await _timed_purge(store, now, expired)


def purge_times(expired: int, kept: int) -> dict[str, float]:
    times = {"sqlite": asyncio.run(purge_sqlite(expired, kept))}
    with postgres_server() as server:
        dsn = asyncio.run(fresh_database(server))
        times["postgres"] = asyncio.run(purge_postgres(dsn, expired, kept))
    return times


def report(size: dict[str, float], purge: dict[str, float], rows: int, out: Path | None) -> str:
    tokens = int(size["tokens"])
    sizes = markdown_table(
        ["stored for a streamed answer", "bytes", "× the response object"],
        [
            [f"response object ({tokens} tokens)", int(size["response_bytes"]), 1.0],
            ["events before (as sent)", int(size["events_bytes_before"]), size["ratio_before"]],
            ["events after (compacted)", int(size["events_bytes_after"]), size["ratio_after"]],
        ],
    )
    times = markdown_table(
        ["backend", "expired responses purged", "seconds"],
        [[backend, rows, seconds] for backend, seconds in purge.items()],
    )
    text = f"{sizes}\n\n{times}\n"
    if out is not None:
        write_markdown(out.parent, "store", text)
    return text


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--tokens", type=int, default=1000)
    args_parser.add_argument("--rows", type=int, default=100_000)
    args = args_parser.parse_args()
    tokens, rows = (100, 1000) if args.smoke else (args.tokens, args.rows)
    logs = Path(tempfile.mkdtemp(prefix="neuraxis-bench-store-logs-"))
    size = bytes_stored(tokens, logs)
    purge = purge_times(rows, rows // 10)
    out = output_path(args, "store.json")
    print(report(size, purge, rows, out))
    write_summary(out, {"bytes": size, "purge_seconds": purge, "rows": rows})


if __name__ == "__main__":
    main()
