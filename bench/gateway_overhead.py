"""Gateway overhead: the same streamed chat requests against the same neuron,
(a) through cortex's HTTP API and (b) straight to the neuron's gRPC Generate.

Starts `neuraxis up` (a real vLLM CPU neuron with SmolLM2 and cortex) on free
ports, then for concurrency 1 and 16 runs the workload over both paths in
alternating order (A B B A ...), and prints the median TTFT and output tokens/s
of each path with cortex's ratio to direct gRPC. Greedy decoding (temperature 0)
with the same prompts makes both paths generate the same tokens.

    make bench                      # defaults
    python -m bench.gateway_overhead --rounds 4 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx

from neuraxis.v1 import neuron_pb2 as pb
from neuraxis.v1 import neuron_pb2_grpc as pb_grpc
from tests.procs import Proc, free_port, wait_http_ready

MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Write a story about a lighthouse keeper.",
    "Explain how rain forms, step by step.",
    "Describe a walk through a busy market.",
    "Write a letter to a friend about a trip to the mountains.",
]


@dataclass
class Run:
    ttfts: list[float]
    tokens: int
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s


async def _via_cortex(
    client: httpx.AsyncClient, base: str, prompt: str, max_tokens: int
) -> tuple[float, int]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft = None
    tokens = 0
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif ttft is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                ttft = time.perf_counter() - started
    assert ttft is not None
    return ttft, tokens


async def _via_grpc(stub: pb_grpc.NeuronStub, prompt: str, max_tokens: int) -> tuple[float, int]:
    request = pb.GenerateRequest(
        request_id=f"bench-{uuid.uuid4().hex}",
        model=MODEL,
        messages=[pb.ChatMessage(role="user", content=prompt)],
        sampling=pb.SamplingParams(max_tokens=max_tokens, temperature=0),
    )
    started = time.perf_counter()
    ttft = None
    tokens = 0
    async for response in stub.Generate(request, timeout=600):
        if ttft is None and response.text:
            ttft = time.perf_counter() - started
        if response.finish_reason:
            tokens = response.usage.completion_tokens
    assert ttft is not None
    return ttft, tokens


async def _run(
    path: str, concurrency: int, requests: int, max_tokens: int, base: str, neuron: str
) -> Run:
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
        channel = grpc.aio.insecure_channel(neuron)
        stub = pb_grpc.NeuronStub(channel)

        async def one(i: int) -> tuple[float, int]:
            prompt = PROMPTS[i % len(PROMPTS)]
            async with semaphore:
                if path == "cortex":
                    return await _via_cortex(http, base, prompt, max_tokens)
                return await _via_grpc(stub, prompt, max_tokens)

        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(requests)))
        wall = time.perf_counter() - started
        await channel.close()
    return Run([r[0] for r in results], sum(r[1] for r in results), wall)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="A/B rounds per concurrency (each runs both paths twice)",
    )
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--out", type=Path, default=Path("bench/results/gateway_overhead.json"))
    args = parser.parse_args()

    port, neuron_port = free_port(), free_port()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.out.parent / "up.log"
    proc = Proc(["up", "--port", str(port), "--neuron-port", str(neuron_port)], log_path)
    base, neuron = f"http://127.0.0.1:{port}", f"127.0.0.1:{neuron_port}"
    summary: dict[str, dict[str, float]] = {}
    try:
        print(f"starting neuraxis up (log: {log_path}) ...", flush=True)
        wait_http_ready(proc, f"{base}/readyz", 900)
        # Warm both paths (first-request costs are not what is measured).
        asyncio.run(_run("cortex", 2, 2, 8, base, neuron))
        asyncio.run(_run("grpc", 2, 2, 8, base, neuron))
        for c in args.concurrency:
            requests = 5 if c == 1 else 2 * c
            runs: dict[str, list[Run]] = {"cortex": [], "grpc": []}
            for r in range(args.rounds):
                order = ["cortex", "grpc"] if r % 2 == 0 else ["grpc", "cortex"]
                for path in order + order[::-1]:
                    run = asyncio.run(_run(path, c, requests, args.max_tokens, base, neuron))
                    runs[path].append(run)
                    ttft_ms = statistics.median(run.ttfts) * 1000
                    print(
                        f"  c={c:<2} {path:<6} ttft p50 {ttft_ms:7.1f} ms  "
                        f"{run.tokens_per_s:6.1f} tok/s  ({run.tokens} tokens, {run.wall_s:.1f} s)",
                        flush=True,
                    )
            for path, rs in runs.items():
                summary[f"c{c}_{path}"] = {
                    "ttft_p50_ms": statistics.median(statistics.median(x.ttfts) for x in rs) * 1000,
                    "tokens_per_s": statistics.median(x.tokens_per_s for x in rs),
                }
    finally:
        proc.stop()

    print()
    print("| concurrency | path | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|---|")
    for c in args.concurrency:
        for path in ("grpc", "cortex"):
            s = summary[f"c{c}_{path}"]
            name = "direct gRPC" if path == "grpc" else "cortex HTTP"
            print(f"| {c} | {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    print()
    for c in args.concurrency:
        g, h = summary[f"c{c}_grpc"], summary[f"c{c}_cortex"]
        ratio = h["tokens_per_s"] / g["tokens_per_s"]
        added = h["ttft_p50_ms"] - g["ttft_p50_ms"]
        summary[f"c{c}_ratio"] = {"tokens_per_s_ratio": ratio, "ttft_added_ms": added}
        print(
            f"concurrency {c}: cortex keeps {ratio * 100:.1f}% of direct tokens/s "
            f"(target >= 97%), adds {added:+.1f} ms to median TTFT (target < 5 ms)"
        )
    args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
