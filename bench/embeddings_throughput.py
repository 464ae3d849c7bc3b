"""Embeddings throughput: inputs/s for batches of 1 and 32 short strings,
(a) through cortex's POST /v1/embeddings and (b) straight to the embedding
neuron's gRPC Embed, against the same neuron in one run (`neuraxis up`).

Requests are sent one after another (one in flight), in alternating order
(A B B A ...); the medians over rounds are printed with cortex's ratio.

    make bench-embeddings
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import grpc
import httpx

from neuraxis.core.v1 import neuron_pb2 as pb
from neuraxis.core.v1 import neuron_pb2_grpc as pb_grpc
from tests.procs import start_up, wait_http_ready

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
        stub = pb_grpc.NeuronStub(channel)
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/embeddings.json"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    up = start_up(args.out.parent / "up-embeddings.log")
    summary: dict[str, float] = {}
    try:
        print("starting neuraxis up ...", flush=True)
        wait_http_ready(up.proc, f"{up.base_url}/readyz", 900)
        asyncio.run(_rate("cortex", 4, 3, up.base_url, up.embedding_address))  # warm-up
        asyncio.run(_rate("grpc", 4, 3, up.base_url, up.embedding_address))
        for batch, requests in ((1, 60), (32, 8)):
            rates: dict[str, list[float]] = {"cortex": [], "grpc": []}
            for r in range(args.rounds):
                order = ["cortex", "grpc"] if r % 2 == 0 else ["grpc", "cortex"]
                for path in order:
                    rate = asyncio.run(
                        _rate(path, batch, requests, up.base_url, up.embedding_address)
                    )
                    rates[path].append(rate)
                    print(f"  batch {batch:<2} {path:<6} {rate:8.1f} inputs/s", flush=True)
            for path, values in rates.items():
                summary[f"batch{batch}_{path}"] = statistics.median(values)
    finally:
        up.proc.stop()
    print()
    print("| batch | direct gRPC (inputs/s) | cortex HTTP (inputs/s) | cortex / direct |")
    print("|---|---|---|---|")
    for batch in (1, 32):
        g, h = summary[f"batch{batch}_grpc"], summary[f"batch{batch}_cortex"]
        print(f"| {batch} | {g:.1f} | {h:.1f} | {h / g * 100:.1f}% |")
    args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
