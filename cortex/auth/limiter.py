"""Per-key rate limits applied to requests: the token estimate, the
reservation at admission (a 429 `rate_limit_exceeded` when over) and its
settlement when the request ends. The arithmetic is limits.py's; the
atomic read-decide-write is the key store's (cortex/store/sqlite_keys.py,
postgres_keys.py, whose docstrings say how exact each is across workers and
instances).

cortex does not tokenize (the neuron owns the tokenizer), so the prompt is
estimated as its serialized request size in bytes / 4 (about 4 characters
per token for English text and code; tools and schemas count, since the
template renders them into the prompt). The output cap is the request's
max_tokens, or the model's context length when it sets none, times n.
The real usage replaces the estimate at settlement.

A request that fails gives its tokens back (it still counts as a request);
one dropped before its usage arrived (the client left) is charged its
whole reservation, since the engine may have spent it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from axon.errors import RateLimitError, TokenRateLimitError
from axon.v1 import neuron_pb2 as pb
from cortex import metrics
from cortex.auth import limits
from cortex.auth.local_usage import LocalUsage
from cortex.auth.principal import Principal
from cortex.store.keys import Adjust, KeyStore, Usage

log = logging.getLogger("neuraxis.cortex")

BYTES_PER_TOKEN = 4


def estimate_generate(request: pb.GenerateRequest, max_context: int) -> int:
    """Tokens a generation may use: prompt estimate + output cap, per choice."""
    prompt = math.ceil(int(request.ByteSize()) / BYTES_PER_TOKEN)
    sampling = request.sampling
    cap = int(sampling.max_tokens) if sampling.HasField("max_tokens") else max_context
    n = int(sampling.n) if sampling.HasField("n") else 1
    return prompt + cap * max(1, n)


def estimate_embed(request: pb.EmbedRequest) -> int:
    return math.ceil(int(request.ByteSize()) / BYTES_PER_TOKEN)


class Limiter:
    def __init__(self, store: KeyStore, clock: Callable[[], float], lease_s: float) -> None:
        self._store, self._clock, self._lease_s = store, clock, lease_s
        # Settlements run after the response (not on its path); kept here
        # so that they are not garbage-collected mid-flight.
        self._settling: set[asyncio.Task[None]] = set()

    async def admit(self, principal: Principal, tokens: int, parts: int = 1) -> Admission:
        """Reserve one request and `tokens` for the principal's key, or raise
        429. `parts`: how many streams report into the admission."""
        assert principal.key_id is not None
        key_limits, now = principal.limits, self._clock()

        def decide(usage: Usage) -> Usage | None:
            decision = limits.admit(key_limits, usage, now, tokens)
            return decision.usage if decision.admitted else None

        lease_id = uuid.uuid4().hex
        seen = await self._store.admit(principal.key_id, lease_id, now, now + self._lease_s, decide)
        # The same pure function on the same inputs: the decision the store applied.
        decision = limits.admit(key_limits, seen, now, tokens)
        _raise_refused(principal, decision)
        return Admission(
            self,
            principal,
            lease_id,
            decision.usage.window,
            tokens,
            parts,
            limits.headers(key_limits, decision.usage, now),
        )

    async def check(self, principal: Principal) -> None:
        """429 if the key is already at its request rate or concurrency;
        reserves nothing (the admission does)."""
        assert principal.key_id is not None
        now = self._clock()
        usage = await self._store.usage(principal.key_id, now)
        _raise_refused(principal, limits.precheck(principal.limits, usage, now))

    async def headers(self, principal: Principal) -> dict[str, str]:
        """Where the key stands now (for responses that reserve nothing)."""
        assert principal.key_id is not None
        now = self._clock()
        usage = await self._store.usage(principal.key_id, now)
        return limits.headers(principal.limits, usage, now)

    def settle_later(self, admission: Admission, used: int) -> None:
        if isinstance(self._store, LocalUsage):
            # Counters in this process: settled on the spot, no task (one a
            # request was a measurable share of what limits cost).
            self._store.settle_now(*self._settlement(admission, used, self._clock()))
            return
        task = asyncio.create_task(self._settle(admission, used))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    @staticmethod
    def _settlement(admission: Admission, used: int, now: float) -> tuple[str, str, float, Adjust]:
        """The key store's `settle` arguments for an admission."""
        assert admission.principal.key_id is not None
        window, reserved = admission.window, admission.reserved
        return (
            admission.principal.key_id,
            admission.lease_id,
            now,
            lambda usage: limits.settle(usage, now, window, reserved, used),
        )

    async def _settle(self, admission: Admission, used: int) -> None:
        try:
            await self._store.settle(*self._settlement(admission, used, self._clock()))
        except Exception:
            # The lease expires on its own; the window's tokens stay reserved.
            log.exception("settling a rate-limit reservation failed")

    async def drain(self) -> None:
        """Wait for the settlements under way (at shutdown)."""
        await asyncio.gather(*self._settling, return_exceptions=True)


def _raise_refused(principal: Principal, decision: limits.Decision) -> None:
    if not decision.admitted:
        metrics.record_rate_limited(principal.tenant, decision.limit or "requests")
        error = TokenRateLimitError if decision.limit == "tokens" else RateLimitError
        raise error(decision.message, retry_after_ms=math.ceil(decision.retry_after_s * 1000))


@dataclass
class Admission:
    """One admitted request's reservation, settled exactly once, when every
    one of its `parts` (streams) has ended, or at once by `release`."""

    limiter: Limiter
    principal: Principal
    lease_id: str
    window: int
    reserved: int
    parts: int
    headers: dict[str, str]
    used: int = 0
    settled: bool = False

    def __post_init__(self) -> None:
        self.share = self.reserved // max(1, self.parts)  # one part's reservation

    def stream_ended(self, used: int | None) -> None:
        """One part's stream ended having used `used` tokens; None: it was
        dropped before its usage arrived, so it is charged its share of the
        reservation (the engine may have spent it)."""
        self.part_ended(used if used is not None else self.share)

    def part_ended(self, used: int) -> None:
        self.used += used
        self.parts -= 1
        if self.parts <= 0:
            self._settle(self.used)

    def release(self) -> None:
        """The request failed before its streams ran: give it all back."""
        self._settle(0)

    def _settle(self, used: int) -> None:
        if not self.settled:
            self.settled = True
            self.limiter.settle_later(self, used)
