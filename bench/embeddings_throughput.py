"""Embeddings throughput: inputs/s for batches of 1 and 32 short strings,
(a) through cortex's POST /v1/embeddings and (b) straight to the embedding
neuron's gRPC Embed, against the same neuron in one run (`neuraxis up`).

Requests are sent one after another (one in flight), in alternating order
(A B B A ...); the medians over rounds are printed with cortex's ratio.

    make bench-embeddings
    python -m bench.embeddings_throughput --smoke   # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid

import grpc
import httpx

from axon.v1 import neuron_pb2 as pb
from harness.bench_stack import RESULTS, Target, output_path, parser, running_stack, write_summary
from harness.procs import neuron_stub

MODEL = "all-minilm-l6-v2"
WORDS = [
    "cat",
    "dog",
    "kitten",
    "river",
    "mountain",
    "engine",
    "carburetor",
    "violin",
    "apple",
    "storm",
]


def _inputs(batch: int, offset: int) -> list[str]:
    return [
        f"a short sentence about {WORDS[(offset + i) % len(WORDS)]} number {i}"
        for i in range(batch)
    ]


async def _rate(path: str, batch: int, requests: int, base: str, neuron: str) -> float:
    async with httpx.AsyncClient(timeout=120) as http:
        channel = grpc.aio.insecure_channel(neuron)
        stub = neuron_stub(channel)
        started = time.perf_counter()
        for r in range(requests):
            texts = _inputs(batch, r)
            if path == "cortex":
                body = {"model": MODEL, "input": texts, "encoding_format": "float"}
                response = await http.post(f"{base}/v1/embeddings", json=body)
                response.raise_for_status()
                assert len(response.json()["data"]) == batch
            else:
                request = pb.EmbedRequest(
                    request_id=f"bench-{uuid.uuid4().hex}",
                    model=MODEL,
                    inputs=[pb.EmbedInput(text=t) for t in texts],
                )
                reply = await stub.Embed(request, timeout=120)
                assert len(reply.embeddings) == batch
        elapsed = time.perf_counter() - started
        await channel.close()
    return batch * requests / elapsed


Batches = tuple[tuple[int, int], ...]  # (inputs per request, requests per run)


def measure(target: Target, batches: Batches, rounds: int) -> dict[str, float]:
    base, neuron = target.base_url, target.embedding_neuron
    asyncio.run(_rate("cortex", 4, 3, base, neuron))  # warm-up
    asyncio.run(_rate("grpc", 4, 3, base, neuron))
    summary: dict[str, float] = {}
    for batch, requests in batches:
        rates: dict[str, list[float]] = {"cortex": [], "grpc": []}
        for r in range(rounds):
            order = ["cortex", "grpc"] if r % 2 == 0 else ["grpc", "cortex"]
            for path in order:
                rate = asyncio.run(_rate(path, batch, requests, base, neuron))
                rates[path].append(rate)
                print(f"  batch {batch:<2} {path:<6} {rate:8.1f} inputs/s", flush=True)
        for path, values in rates.items():
            summary[f"batch{batch}_{path}"] = statistics.median(values)
    return summary


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=3)
    args = cli.parse_args(argv)
    batches: Batches = ((1, 60), (32, 8))
    if args.smoke:
        args.rounds, batches = 1, ((1, 2), (32, 1))
    with running_stack(args, RESULTS / "up-embeddings.log") as target:
        summary = measure(target, batches, args.rounds)
    print()
    print("| batch | direct gRPC (inputs/s) | cortex HTTP (inputs/s) | cortex / direct |")
    print("|---|---|---|---|")
    for batch, _ in batches:
        g, h = summary[f"batch{batch}_grpc"], summary[f"batch{batch}_cortex"]
        print(f"| {batch} | {g:.1f} | {h:.1f} | {h / g * 100:.1f}% |")
    write_summary(output_path(args, "embeddings.json"), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
