"""The streamed-chat workload the benchmarks share: the same greedy requests
sent through cortex's HTTP API or straight to a neuron's gRPC Generate, with
time to first token and output tokens counted per request."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import httpx

from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from harness import sse, streamed_chat
from harness.paired import paired_rounds
from harness.procs import neuron_stub

T = TypeVar("T")
MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Write a story about a lighthouse keeper.",
    "Explain how rain forms, step by step.",
    "Describe a walk through a busy market.",
    "Write a letter to a friend about a trip to the mountains.",
]


def chat_body(model: str, prompt: str, max_tokens: int, extra: Mapping[str, Any]) -> dict[str, Any]:
    """A greedy streamed chat request, with usage in its last chunk."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


@dataclass
class Run:
    ttfts: list[float]
    tokens: int
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s


async def via_cortex(
    client: httpx.AsyncClient, base: str, prompt: str, max_tokens: int
) -> tuple[float, int]:
    body = chat_body(MODEL, prompt, max_tokens, {})
    seen = await streamed_chat.read(client, f"{base}{streamed_chat.CHAT_PATH}", body)
    seen.raise_if_cut()
    assert seen.ttft is not None
    return seen.ttft, seen.completion_tokens


async def via_responses(
    client: httpx.AsyncClient, base: str, prompt: str, max_tokens: int
) -> tuple[float, int]:
    body = {
        "model": MODEL,
        "input": prompt,
        "temperature": 0,
        "max_output_tokens": max_tokens,
        "stream": True,
    }
    started = time.perf_counter()
    ttft = None
    tokens = 0
    async with client.stream("POST", f"{base}/v1/responses", json=body) as r:
        r.raise_for_status()
        async for event in sse.aobjects(r.aiter_lines()):
            if ttft is None and event["type"] == "response.output_text.delta":
                ttft = time.perf_counter() - started
            elif event["type"] in ("response.completed", "response.incomplete"):
                tokens = event["response"]["usage"]["output_tokens"]
    assert ttft is not None
    return ttft, tokens


async def via_grpc(stub: pb_grpc.NeuronStub, prompt: str, max_tokens: int) -> tuple[float, int]:
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
        if ttft is None and any(c.text for c in response.choices):
            ttft = time.perf_counter() - started
        if response.HasField("usage"):
            tokens = response.usage.completion_tokens
    assert ttft is not None
    return ttft, tokens


async def gathered(
    requests: int, concurrency: int, one: Callable[[int], Awaitable[T]]
) -> tuple[list[T], float]:
    """`one(i)` for each of `requests` indices, at most `concurrency` at
    once: their results in index order, and the wall time they took."""
    semaphore = asyncio.Semaphore(concurrency)

    async def gated(i: int) -> T:
        async with semaphore:
            return await one(i)

    started = time.perf_counter()
    results = await asyncio.gather(*(gated(i) for i in range(requests)))
    return list(results), time.perf_counter() - started


async def timed(
    requests: int, concurrency: int, one: Callable[[int], Awaitable[tuple[float, int]]]
) -> Run:
    """`gathered`, where each request returns its TTFT and output tokens."""
    results, wall = await gathered(requests, concurrency, one)
    return Run([r[0] for r in results], sum(r[1] for r in results), wall)


async def run(
    path: str, concurrency: int, requests: int, max_tokens: int, base: str, neuron: str
) -> Run:
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
        channel = grpc.aio.insecure_channel(neuron)
        stub = neuron_stub(channel)

        async def one(i: int) -> tuple[float, int]:
            prompt = PROMPTS[i % len(PROMPTS)]
            if path == "cortex":
                return await via_cortex(http, base, prompt, max_tokens)
            if path == "responses":
                return await via_responses(http, base, prompt, max_tokens)
            return await via_grpc(stub, prompt, max_tokens)

        result = await timed(requests, concurrency, one)
        await channel.close()
    return result


Summary = dict[str, dict[str, float]]


def compare(
    paths: tuple[str, str],
    base: str,
    neuron: str,
    concurrency: list[int],
    rounds: int,
    max_tokens: int,
) -> Summary:
    """The same workload over two paths, after a warm-up of each, in
    alternating order (A B B A, then B A A B, ...) so that drift on a shared
    machine falls on both alike; per concurrency, each path's median TTFT and
    output tokens/s over its runs (keys "c<concurrency>_<path>")."""
    for path in paths:  # first-request costs are not what is measured
        asyncio.run(run(path, 2, 2, 8, base, neuron))
    summary: Summary = {}
    for c in concurrency:
        requests = 5 if c == 1 else 2 * c

        def one(path: str, c: int = c, requests: int = requests) -> Run:
            return asyncio.run(run(path, c, requests, max_tokens, base, neuron))

        paired = paired_rounds(paths, rounds, one, f"c={c:<2}")
        for path in paths:
            summary[f"c{c}_{path}"] = paired.medians(path)
    return summary
