"""The routing benchmark's workloads: groups of users sharing a long system
prompt, each user holding a multi-turn conversation that extends itself,
requests from all users interleaved (`shared`), or one group only (`hot`).

A `Shape` says how many groups, users and turns, how long the shared prefix
is and how long the answers are; `conversations` makes the users' scripts
from a seed (each policy of a run gets its own seed, so no policy finds
blocks another left in the engines' caches); `run_workload` sends them
through cortex's streamed chat completions and times each request.

What does not live here: starting cortex and reading the neurons' metrics
(routing.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

import httpx

from harness import streamed_chat

MODEL = "smollm2-135m-instruct"
# Ordinary words, so the tokenizer sees about one token a word (SmolLM2: 1,515
# tokens for 1,500 words), not bytes.
_VOCABULARY = (
    "river stone garden window morning light winter paper market signal harbour "
    "engine letter forest mountain valley silver copper station bridge lantern "
    "orchard meadow thunder planet circle island castle library village candle "
    "ribbon pocket ladder mirror saddle basket kettle blanket feather compass"
)
_WORDS = _VOCABULARY.split()


@dataclass(frozen=True)
class Shape:
    groups: int
    users_per_group: int
    turns: int
    prefix_words: int  # the shared system prompt's length
    max_tokens: int  # each answer's length
    concurrency: int  # requests in flight at once


@dataclass(frozen=True)
class User:
    group: int
    system: str
    questions: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    """One request: time to its first token, tokens out, its group, and
    whether it failed (counted, not timed)."""

    ttft_s: float
    output_tokens: int
    group: int
    turn: int
    failed: bool = False  # the stream ended with an error event
    error: str = ""  # that event's code (its type when it has none)


def conversations(shape: Shape, seed: int) -> list[User]:
    """Every user's script; users of one group share their system prompt."""
    rng = random.Random(seed)
    users = []
    for g in range(shape.groups):
        body = " ".join(rng.choice(_WORDS) for _ in range(shape.prefix_words))
        system = f"You are assistant {seed}-{g}. Keep these notes in mind: {body}"
        for u in range(shape.users_per_group):
            questions = tuple(
                f"User {u} asks, turn {t}: what about the {rng.choice(_WORDS)}?"
                for t in range(shape.turns)
            )
            users.append(User(g, system, questions))
    rng.shuffle(users)  # groups interleaved, not one after another
    return users


async def _one(
    http: httpx.AsyncClient, base: str, messages: list[dict[str, str]], max_tokens: int
) -> tuple[float, int, str, str]:
    """Time to first token, tokens out, the answer, and the code of the
    error event the stream ended with ("" if none: the run goes on and
    counts the ones that did, by code)."""
    body = {
        "model": MODEL,
        "messages": messages,
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    seen = await streamed_chat.read(http, f"{base}{streamed_chat.CHAT_PATH}", body)
    seen.raise_if_cut()
    error = seen.error_event
    code = "" if error is None else str(error.get("code") or error.get("type") or "error")
    # A first chunk without text (an empty answer) still ends the wait; a
    # failed request is counted, not timed.
    first = seen.ttft if seen.ttft is not None else seen.ended_at - seen.started_at
    return first, seen.completion_tokens, seen.answer, code


async def run_workload(base: str, users: list[User], shape: Shape) -> tuple[list[Sample], float]:
    """Each user's turns in order (a turn carries the whole conversation so
    far), users concurrently up to `shape.concurrency` requests in flight.
    Returns the samples and the wall time."""
    gate = asyncio.Semaphore(shape.concurrency)
    samples: list[Sample] = []

    async def converse(http: httpx.AsyncClient, user: User) -> None:
        messages = [{"role": "system", "content": user.system}]
        for turn, question in enumerate(user.questions):
            messages.append({"role": "user", "content": question})
            async with gate:
                ttft, tokens, answer, error = await _one(http, base, messages, shape.max_tokens)
            samples.append(Sample(ttft, tokens, user.group, turn, bool(error), error))
            messages.append({"role": "assistant", "content": answer})

    limits = httpx.Limits(max_connections=shape.concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(converse(http, u) for u in users))
        return samples, time.perf_counter() - started
