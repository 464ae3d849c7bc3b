"""The sim engine's modelled prefix cache: the LRU of chained block hashes,
the prefill lane, and what the engine reports from them (usage, load)."""

from __future__ import annotations

import asyncio
import time

import pytest

from axon.priority import PriorityClass
from neuron.engine.base import EngineRequest, Sampling, Usage
from neuron.engine.sim import SimEngine, SimOptions
from neuron.engine.sim_cache import BlockLru, Prefilled, PrefillModel, PrefixCacheOptions

# 4 characters a token, 2 tokens a block: one block is 8 characters.
SMALL = PrefixCacheOptions(capacity_blocks=4, block_tokens=2, chars_per_token=4)


def test_lru_evicts_the_least_recently_used_block() -> None:
    lru = BlockLru(2)
    lru.insert([b"a", b"b"])
    assert lru.hits([b"a"]) == 1  # a is now the most recent
    lru.insert([b"c"])
    assert b"b" not in lru
    assert b"a" in lru and b"c" in lru
    assert len(lru) == 2


def test_hits_stop_at_the_first_miss() -> None:
    lru = BlockLru(8)
    lru.insert([b"a", b"c"])
    assert lru.hits([b"a", b"b", b"c"]) == 1


def test_blocks_are_chained_and_only_full_ones_count() -> None:
    model = PrefillModel(SMALL)
    one = model.blocks("system!" + "x" * 17)  # 24 characters: 3 blocks
    other = model.blocks("system?" + "x" * 17)
    assert len(one) == 3
    assert len(model.blocks("x" * 23)) == 2
    # A difference in the first block changes every later block's hash.
    assert not set(one) & set(other)
    assert model.blocks("system!" + "x" * 9 + "yyyyyyyy")[:2] == one[:2]


async def test_second_prompt_with_the_same_prefix_is_served_from_the_cache() -> None:
    model = PrefillModel(SMALL)
    first = await model.prefill("a" * 20)  # 5 tokens, 2 full blocks
    second = await model.prefill("a" * 20)
    assert (first.prompt_tokens, first.cached_tokens) == (5, 0)
    assert (second.prompt_tokens, second.cached_tokens) == (5, 4)


async def test_capacity_evicts_old_prefixes() -> None:
    model = PrefillModel(SMALL)  # 4 blocks
    await model.prefill("a" * 16)
    await model.prefill("b" * 32)  # 4 blocks of its own push a's out
    assert (await model.prefill("a" * 16)).cached_tokens == 0


async def test_without_a_capacity_nothing_is_cached_and_tokens_are_words() -> None:
    model = PrefillModel(PrefixCacheOptions())
    await model.prefill("one two three")
    assert await model.prefill("one two three") == Prefilled(3, 0)


async def test_prefill_time_follows_the_uncached_tokens() -> None:
    options = PrefixCacheOptions(capacity_blocks=256, block_tokens=1, prefill_s_per_token=0.002)
    model = PrefillModel(options)
    text = "abcd" * 100  # 100 tokens: 0.2 s cold
    started = time.perf_counter()
    await model.prefill(text)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    await model.prefill(text + "efgh" * 5)  # 5 uncached tokens: 0.01 s
    warm = time.perf_counter() - started
    assert cold >= 0.2
    assert warm < cold / 4


def _request(text: str) -> EngineRequest:
    return EngineRequest(request_id="r", model="m", prompt=text, sampling=Sampling(max_tokens=2))


async def _usage(engine: SimEngine, text: str) -> Usage:
    usages = [o.usage async for o in engine.generate(_request(text)) if o.usage is not None]
    return usages[-1]


async def test_engine_reports_cached_prompt_tokens_in_usage() -> None:
    options = PrefixCacheOptions(capacity_blocks=64, block_tokens=4, chars_per_token=1)
    engine = SimEngine(SimOptions(served_id="m", ttft_s=0, itl_s=0, prefix_cache=options))
    assert await _usage(engine, "0123456789") == Usage(10, 2, 0)
    assert await _usage(engine, "0123456789") == Usage(10, 2, 8)


async def test_load_reports_requests_queued_for_prefill_as_waiting() -> None:
    options = PrefixCacheOptions(capacity_blocks=64, block_tokens=1, prefill_s_per_token=0.05)
    engine = SimEngine(SimOptions(served_id="m", ttft_s=0, itl_s=0, prefix_cache=options))
    tasks = [asyncio.create_task(_usage(engine, f"{i}" * 400)) for i in range(3)]
    deadline = time.monotonic() + 5
    while engine.load().waiting != 2:
        assert time.monotonic() < deadline, engine.load()
        await asyncio.sleep(0.005)
    assert engine.load().running == 1
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert (engine.load().running, engine.load().waiting) == (0, 0)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError):
        PrefixCacheOptions(block_tokens=0)
    with pytest.raises(ValueError):
        PrefixCacheOptions(prefill_s_per_token=-1)


@pytest.mark.parametrize("by_priority", [True, False])
async def test_the_prefill_lane_takes_the_interactive_prompt_first_when_by_priority(
    by_priority: bool,
) -> None:
    """As vLLM's scheduler with scheduling_policy = "priority": a waiting
    interactive prompt is prefilled before batch prompts that came earlier
    (in arrival order otherwise)."""
    options = PrefixCacheOptions(capacity_blocks=1, block_tokens=1, prefill_s_per_token=0.001)
    model = PrefillModel(options, by_priority)
    done: list[str] = []

    async def prefill(name: str, cls: PriorityClass) -> None:
        await model.prefill(name * 40, cls)
        done.append(name)

    first = asyncio.create_task(prefill("a", "batch"))  # takes the lane
    await asyncio.sleep(0)
    queued = [asyncio.create_task(prefill(n, "batch")) for n in "bc"]
    await asyncio.sleep(0)
    urgent = asyncio.create_task(prefill("i", "interactive"))
    await asyncio.sleep(0)
    assert model.waiting == 3
    await asyncio.gather(first, *queued, urgent)
    assert done == (["a", "i", "b", "c"] if by_priority else ["a", "b", "c", "i"])
    assert model.waiting == 0
