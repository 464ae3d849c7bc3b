"""The Responses API against Chat Completions for the same generation, and
what the Responses store adds per response.

1. Starts `neuraxis up`, streams the same greedy requests through
   /v1/responses and /v1/chat/completions at concurrency 1 and 16 in
   alternating order, and prints median TTFT and output tokens/s with the
   Responses/chat ratio.
2. Times the store's write (put) of a typical stored response, SQLite (a
   file, synchronous=FULL) and PostgreSQL (a throwaway local server).

    make bench-responses
    python -m bench.responses_vs_chat --smoke   # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cortex.store.base import ResponseStore, StoredResponse
from cortex.store.postgres import PostgresResponseStore
from cortex.store.sqlite import SqliteResponseStore
from harness.bench_stack import RESULTS, Target, output_path, parser, running_stack, write_summary
from harness.postgres import postgres_server
from harness.workload import Summary, compare


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


def store_latency(puts: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_ms = asyncio.run(_put_latency_ms(SqliteResponseStore(Path(tmp) / "r.sqlite3"), puts))
    with postgres_server() as dsn:
        postgres_ms = asyncio.run(_put_latency_ms(PostgresResponseStore(dsn), puts))
    print(
        f"store write, median of {puts}: SQLite {sqlite_ms:.2f} ms, PostgreSQL {postgres_ms:.2f} ms"
    )
    return {"sqlite": sqlite_ms, "postgres": postgres_ms}


def measure(target: Target, concurrency: list[int], rounds: int, max_tokens: int) -> Summary:
    return compare(
        ("cortex", "responses"),
        target.base_url,
        target.chat_neuron,
        concurrency,
        rounds,
        max_tokens,
    )


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=2)
    cli.add_argument("--max-tokens", type=int, default=32)
    args = cli.parse_args(argv)
    concurrency, puts = [1, 16], 200
    if args.smoke:
        args.rounds, args.max_tokens, concurrency, puts = 1, 4, [1, 2], 5
    summary: Summary = {"store_put_ms": store_latency(puts)}
    with running_stack(args, RESULTS / "up-responses.log") as target:
        summary.update(measure(target, concurrency, args.rounds, args.max_tokens))
    print()
    print("| concurrency | API | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|---|")
    for c in concurrency:
        for path, name in (("cortex", "chat completions"), ("responses", "responses")):
            s = summary[f"c{c}_{path}"]
            print(f"| {c} | {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    for c in concurrency:
        ratio = summary[f"c{c}_responses"]["tokens_per_s"] / summary[f"c{c}_cortex"]["tokens_per_s"]
        print(
            f"concurrency {c}: responses at {ratio * 100:.1f}% of chat tokens/s (target within 3%)"
        )
    write_summary(output_path(args, "responses.json"), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
