"""The Responses API against Chat Completions for the same generation, and
what the Responses store adds per response.

1. Starts `neuraxis up`, streams the same greedy requests through
   /v1/responses and /v1/chat/completions at concurrency 1 and 16 in
   alternating order, and prints median TTFT and output tokens/s with the
   Responses/chat ratio.
2. Times the store's write (put) of a typical stored response, SQLite (a
   file, synchronous=FULL) and PostgreSQL (a throwaway local server).

    make bench-responses
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.workload import Run, run
from cortex.store.base import ResponseStore, StoredResponse
from cortex.store.postgres import PostgresResponseStore
from cortex.store.sqlite import SqliteResponseStore
from tests.postgres import postgres_server
from tests.procs import start_up, wait_http_ready


def _record(i: int) -> StoredResponse:
    text = "The capital of France is Paris. " * 8
    output = [{"type": "message", "content": [{"type": "output_text", "text": text}]}]
    question = [{"type": "input_text", "text": "What is the capital of France?"}]
    return StoredResponse(
        id=f"resp_bench{i}",
        created_at=int(time.time()),
        previous_response_id=None,
        response={"id": f"resp_bench{i}", "object": "response", "output": output},
        input_items=[{"id": f"msg_{i}", "type": "message", "role": "user", "content": question}],
    )


async def _put_latency_ms(store: ResponseStore, n: int) -> float:
    await store.put(_record(-1))  # connect / warm up
    times = []
    for i in range(n):
        started = time.perf_counter()
        await store.put(_record(i))
        times.append(time.perf_counter() - started)
    await store.close()
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("bench/results/responses.json"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict[str, float]] = {}

    with tempfile.TemporaryDirectory() as tmp:
        sqlite_ms = asyncio.run(_put_latency_ms(SqliteResponseStore(Path(tmp) / "r.sqlite3"), 200))
    with postgres_server() as dsn:
        postgres_ms = asyncio.run(_put_latency_ms(PostgresResponseStore(dsn), 200))
    summary["store_put_ms"] = {"sqlite": sqlite_ms, "postgres": postgres_ms}
    print(f"store write, median of 200: SQLite {sqlite_ms:.2f} ms, PostgreSQL {postgres_ms:.2f} ms")

    up = start_up(args.out.parent / "up-responses.log")
    try:
        wait_http_ready(up.proc, f"{up.base_url}/readyz", 900)
        for path in ("cortex", "responses"):  # warm-up
            asyncio.run(run(path, 2, 2, 8, up.base_url, up.neuron_address))
        for c in (1, 16):
            requests = 5 if c == 1 else 2 * c
            runs: dict[str, list[Run]] = {"cortex": [], "responses": []}
            for r in range(args.rounds):
                order = ["cortex", "responses"] if r % 2 == 0 else ["responses", "cortex"]
                for path in order + order[::-1]:
                    result = asyncio.run(
                        run(path, c, requests, args.max_tokens, up.base_url, up.neuron_address)
                    )
                    runs[path].append(result)
                    ttft_ms = statistics.median(result.ttfts) * 1000
                    print(
                        f"  c={c:<2} {path:<9} ttft p50 {ttft_ms:7.1f} ms  "
                        f"{result.tokens_per_s:6.1f} tok/s",
                        flush=True,
                    )
            for path, rs in runs.items():
                summary[f"c{c}_{path}"] = {
                    "ttft_p50_ms": statistics.median(statistics.median(x.ttfts) for x in rs) * 1000,
                    "tokens_per_s": statistics.median(x.tokens_per_s for x in rs),
                }
    finally:
        up.proc.stop()
    print()
    print("| concurrency | API | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|---|")
    for c in (1, 16):
        for path, name in (("cortex", "chat completions"), ("responses", "responses")):
            s = summary[f"c{c}_{path}"]
            print(f"| {c} | {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    for c in (1, 16):
        ratio = summary[f"c{c}_responses"]["tokens_per_s"] / summary[f"c{c}_cortex"]["tokens_per_s"]
        print(
            f"concurrency {c}: responses at {ratio * 100:.1f}% of chat tokens/s (target within 3%)"
        )
    args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
