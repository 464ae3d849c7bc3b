"""The sim engine's modelled prefix cache and prefill queue.

What a cache-aware router acts on, without a model: an LRU of prompt-block
hashes (vLLM's automatic prefix caching keeps full blocks of tokens, keyed by
a hash chained over every earlier block, and evicts the least recently used
free block), and a prefill whose time is proportional to the prompt tokens
that missed it. The sim has no tokenizer, so a token is a fixed number of
characters of the prompt text (`chars_per_token`, 4 by default: roughly
English text under a BPE vocabulary); a block is `block_tokens` such tokens.

Prefills take turns on one lane per engine (an engine spends its compute on
one prefill batch at a time; a long miss delays the prefills behind it), so
a request waiting for the lane is what the engine reports as `waiting`.
Decoding is not modelled here: the sim engine's fixed inter-token time.

Without a capacity (the default) there is no cache and no lane: prompt
tokens are the sim's whitespace-separated words, and prefill costs nothing
beyond the sim's time to first token, as before the model existed.

What does not live here: the token stream and the faults (`sim.py`). The
cache models only reusable (evictable) blocks; the KV memory of running
requests is not modelled, so the sim reports no KV-cache usage. Nor does it
export vLLM's prefix-cache counters: the hit rate is read from the cached
prompt tokens each response's usage reports.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from axon.priority import DEFAULT_CLASS, PriorityClass
from neuron.engine.sim_slots import Slots


@dataclass(frozen=True)
class PrefixCacheOptions:
    capacity_blocks: int = 0  # 0: no modelled cache (and no prefill lane)
    block_tokens: int = 16  # vLLM's default block size
    chars_per_token: int = 4
    prefill_s_per_token: float = 0.0  # prefill time per prompt token not in the cache

    def __post_init__(self) -> None:
        if self.capacity_blocks < 0 or self.block_tokens <= 0 or self.chars_per_token <= 0:
            raise ValueError("capacity must be >= 0, block and token sizes positive")
        if self.prefill_s_per_token < 0:
            raise ValueError("prefill_s_per_token must not be negative")

    @property
    def enabled(self) -> bool:
        return self.capacity_blocks > 0


class BlockLru:
    """Block hashes, least recently used first; at most `capacity` of them."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: bytes) -> bool:
        return block in self._blocks

    def hits(self, blocks: Sequence[bytes]) -> int:
        """How many of `blocks`, from the first, are cached (a chained hash
        makes a block useless after a miss); those are touched."""
        count = 0
        for block in blocks:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            count += 1
        return count

    def insert(self, blocks: Sequence[bytes]) -> None:
        """Cache `blocks` (most recently used), evicting the oldest past capacity."""
        for block in blocks:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)


@dataclass(frozen=True)
class Prefilled:
    prompt_tokens: int
    cached_tokens: int


class PrefillModel:
    """One engine's prefix cache and prefill lane (one prompt at a time; the
    waiting ones by class first when `by_priority`)."""

    def __init__(self, options: PrefixCacheOptions, by_priority: bool = False) -> None:
        self._options = options
        self._cache = BlockLru(options.capacity_blocks)
        self._lane = Slots(1, by_priority)

    @property
    def waiting(self) -> int:
        """The requests queued for the lane."""
        return self._lane.waiting

    def prompt_tokens(self, text: str) -> int:
        if not self._options.enabled:
            return len(text.split())
        return math.ceil(len(text) / self._options.chars_per_token)

    def blocks(self, text: str) -> list[bytes]:
        """The chained hashes of the prompt's full blocks (a partial last
        block is never cached, as in vLLM)."""
        size = self._options.block_tokens * self._options.chars_per_token
        data = text.encode()
        out: list[bytes] = []
        previous = b""
        for k in range(len(data) // size):
            previous = hashlib.blake2b(
                previous + data[k * size : (k + 1) * size], digest_size=8
            ).digest()
            out.append(previous)
        return out

    async def prefill(self, text: str, cls: PriorityClass = DEFAULT_CLASS) -> Prefilled:
        """Wait for the lane, look the prompt up, spend the time its uncached
        tokens cost, then cache its blocks."""
        tokens = self.prompt_tokens(text)
        if not self._options.enabled:
            return Prefilled(tokens, 0)
        blocks = self.blocks(text)
        async with self._lane.slot(cls):
            cached = min(self._cache.hits(blocks) * self._options.block_tokens, tokens)
            await asyncio.sleep((tokens - cached) * self._options.prefill_s_per_token)
            self._cache.insert(blocks)
        return Prefilled(tokens, cached)
