"""The shared-prefix multi-turn chat workload of the routing benchmarks.

Groups of users: each group has its own long system prompt; each user of a
group sends `turns` streamed requests, each extending its own conversation
(system prompt, then its earlier turns and the answers it got). Users are
shuffled so groups interleave, and at most `concurrency` users are in a
conversation at once (closed loop). One hot group is the same with a single
group. Per request the client records time to first token and the usage it
was sent (prompt, cached prompt and completion tokens).

What does not live here: starting processes and reporting (routing_sim.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from harness import streamed_chat
from harness.ratios import ratio

WORDS = [
    *("cache", "replica", "router", "prefix", "token", "block", "engine", "prompt"),
    *("system", "policy", "load", "balance", "stream", "latency", "queue", "batch"),
    *("model", "context", "window", "answer", "question"),
]


@dataclass(frozen=True)
class Shape:
    groups: int
    users_per_group: int
    turns: int = 3
    system_chars: int = 4000  # ~1,000 tokens at 4 characters a token
    user_chars: int = 200
    max_tokens: int = 8
    concurrency: int = 32

    @property
    def requests(self) -> int:
        return self.groups * self.users_per_group * self.turns


@dataclass
class Result:
    ttfts: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0

    def ttft_ms(self, q: float) -> float:
        """The q-quantile of TTFT in milliseconds (q in 0..1)."""
        cut = statistics.quantiles(self.ttfts, n=100, method="inclusive")
        return cut[min(max(round(q * 100) - 1, 0), 98)] * 1000

    @property
    def tokens_per_s(self) -> float:
        return ratio(self.completion_tokens, self.wall_s)

    @property
    def hit_rate(self) -> float:
        return ratio(self.cached_tokens, self.prompt_tokens)


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def conversations(shape: Shape, tag: str, seed: int = 0) -> list[list[str]]:
    """Per user, the system prompt followed by its user turns, users of all
    groups shuffled. `tag` leads every system prompt, so that two runs of
    the same shape share no prefix (each run starts with cold caches)."""
    rng = random.Random(seed)
    # The tag goes in short (8 hex digits): a long one would fill the first
    # prefix block with text every group shares, and a router that homes a
    # prefix by its first block would see one group where there are many.
    short = hashlib.blake2b(tag.encode(), digest_size=4).hexdigest()
    users = []
    for g in range(shape.groups):
        system = f"[{short} group {g}] " + _text(rng, shape.system_chars)
        for u in range(shape.users_per_group):
            turns = [f"user {u}: " + _text(rng, shape.user_chars) for _ in range(shape.turns)]
            users.append([system, *turns])
    rng.shuffle(users)
    return users


async def _turn(
    client: httpx.AsyncClient, model: str, messages: list[dict[str, str]], shape: Shape
) -> tuple[float, str, dict[str, int]]:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": shape.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    seen = await streamed_chat.read(client, streamed_chat.CHAT_PATH, body)
    seen.raise_if_cut()
    if seen.error_event is not None:
        raise RuntimeError(f"stream failed: {seen.error_event}")
    if seen.ttft is None or seen.usage is None:
        raise RuntimeError("a stream ended without output or usage")
    cached = (seen.usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    usage = {
        "prompt": seen.usage["prompt_tokens"],
        "cached": cached,
        "completion": seen.completion_tokens,
    }
    return seen.ttft, seen.answer, usage


async def run(base_url: str, model: str, shape: Shape, tag: str, seed: int = 0) -> Result:
    """Every user's conversation through cortex at `base_url`."""
    result = Result()
    users = conversations(shape, tag, seed)
    slots = asyncio.Semaphore(shape.concurrency)
    limits = httpx.Limits(max_connections=shape.concurrency, max_keepalive_connections=None)

    async def converse(client: httpx.AsyncClient, user: list[str]) -> None:
        messages = [{"role": "system", "content": user[0]}]
        async with slots:
            for turn in user[1:]:
                messages.append({"role": "user", "content": turn})
                ttft, answer, usage = await _turn(client, model, messages, shape)
                messages.append({"role": "assistant", "content": answer})
                result.ttfts.append(ttft)
                result.prompt_tokens += usage["prompt"]
                result.cached_tokens += usage["cached"]
                result.completion_tokens += usage["completion"]

    async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(converse(client, user) for user in users))
        result.wall_s = time.perf_counter() - started
    return result


@dataclass
class Cell:
    """One (workload, config) over all its rounds."""

    result: Result
    routed: dict[str, float]

    def add(self, result: Result, routed: dict[str, float]) -> None:
        self.result.ttfts += result.ttfts
        self.result.prompt_tokens += result.prompt_tokens
        self.result.cached_tokens += result.cached_tokens
        self.result.completion_tokens += result.completion_tokens
        self.result.wall_s += result.wall_s
        for replica, n in routed.items():
            self.routed[replica] = self.routed.get(replica, 0.0) + n

    def shares(self, replicas: Sequence[str]) -> list[float]:
        """Each replica's share of requests relative to the average (1.0 = fair)."""
        total = sum(self.routed.get(r, 0.0) for r in replicas)
        average = total / len(replicas) if total else 1.0
        return [self.routed.get(r, 0.0) / average for r in replicas]
