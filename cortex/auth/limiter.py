"""Per-key and tenant-wide rate limits applied to requests: the token
estimate, the reservation at admission (a 429 `rate_limit_exceeded` when
over) and its settlement when the request ends. The arithmetic is limits.py's; the
atomic read-decide-write is the key store's (cortex/store/sqlite_keys.py,
postgres_keys.py, whose docstrings say how exact each is across workers and
instances).

A tenant's own limits (`neuraxis tenants set --tpm/--max-concurrent`, read
through the `TenantPolicies`) bound all its keys together: they are one more
counter in the same store, `tenant:<name>`, reserved before the key's with
the same arithmetic, so they are exact as the keys' are.

cortex does not tokenize (the neuron owns the tokenizer), so the prompt is
reserved at a bound its real count cannot pass: every token of a tokenizer
covers at least one byte of text, so a prompt has at most as many tokens as
its bytes (the serialized request's, framing included: the framing of a
message is more bytes than the template's tokens around it), plus what the
chat template writes of its own (`TEMPLATE_TOKENS`: a default system
prompt, the tools' preamble; `TOOL_TOKENS` for the JSON it wraps around
each tool), and never more than the model's context. Token-id inputs
(embeddings) are counted exactly. The output cap is the request's
max_tokens, or the model's context length when it sets none, times n.
So a reservation is at most about 4 times the tokens of English text (3-4
bytes a token), and settles to the real usage when the request ends: the
difference goes back to the window (bytes/4 was the estimate before, and
text of one byte a token ran 4 times past a key's tpm).

A request that fails gives its tokens back (it still counts as a request);
one dropped before its usage arrived (the client left) is charged its
prompt's reservation and the output it was seen to generate (a choice's
delta is at least a token), not the output it never made.
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
from cortex.auth.limits import Limits
from cortex.auth.local_usage import LocalUsage
from cortex.auth.principal import Principal
from cortex.routing.tenant_policy import FixedTenantPolicies, TenantPolicies
from cortex.store.keys import Adjust, KeyStore, Usage

log = logging.getLogger("neuraxis.cortex")

# What a chat template writes besides the messages: a default system
# prompt, the tools' preamble, the turn markers of the answer (SmolLM2's
# default system prompt is ~40 tokens, Qwen2.5's tools preamble ~100).
TEMPLATE_TOKENS = 256
# The JSON a template wraps around each tool's name, description and
# parameters ({"type": "function", "function": {"name": ...}}: ~80 bytes).
TOOL_TOKENS = 96
# Special tokens an embedding model adds to each text input (BOS, EOS).
SPECIAL_TOKENS = 2


def prompt_bound(request: pb.GenerateRequest, max_context: int) -> int:
    """Tokens the prompt of `request` cannot exceed (0: context unknown)."""
    bound = int(request.ByteSize()) + TEMPLATE_TOKENS + TOOL_TOKENS * len(request.tools)
    return min(bound, max_context) if max_context else bound


def output_cap(request: pb.GenerateRequest, unset: int) -> int:
    """Tokens a generation may output: its max_tokens per choice, or `unset`
    (what the model generates without one: its default, at most the context)."""
    sampling = request.sampling
    cap = int(sampling.max_tokens) if sampling.HasField("max_tokens") else unset
    n = int(sampling.n) if sampling.HasField("n") else 1
    return cap * max(1, n)


def estimate_generate(request: pb.GenerateRequest, max_context: int, unset: int) -> int:
    """Tokens a generation may use: the prompt's bound + output cap, per choice
    (`unset`: output_cap's)."""
    return prompt_bound(request, max_context) + output_cap(request, unset)


def estimate_embed(request: pb.EmbedRequest) -> int:
    """Token ids counted, text at a token a byte (and its special tokens)."""
    return sum(
        len(i.tokens.ids) if i.HasField("tokens") else len(i.text.encode()) + SPECIAL_TOKENS
        for i in request.inputs
    )


@dataclass(frozen=True)
class Lease:
    """One counter's part of an admission: the counter (a key's id, or
    `tenant_counter`'s), the lease taken on it and the window it reserved in."""

    counter: str
    lease_id: str
    window: int


def tenant_counter(tenant: str) -> str:
    """The counter of a tenant's tenant-wide limits, beside its keys' (whose
    ids start with "key_", so the two never meet)."""
    return f"tenant:{tenant}"


class Limiter:
    def __init__(
        self,
        store: KeyStore,
        clock: Callable[[], float],
        lease_s: float,
        policies: TenantPolicies | None = None,
    ) -> None:
        self._store, self._clock, self._lease_s = store, clock, lease_s
        self._policies = policies or FixedTenantPolicies()
        # Settlements run after the response (not on its path); kept here
        # so that they are not garbage-collected mid-flight.
        self._settling: set[asyncio.Task[None]] = set()

    def tenant_limits(self, tenant: str) -> Limits:
        """The tenant-wide limits of `tenant` (its row's, read by the policies)."""
        policy = self._policies.policy(tenant)
        return Limits(tpm=policy.tpm, max_concurrent=policy.max_concurrent)

    def _counters(self, principal: Principal) -> list[tuple[str, Limits, str]]:
        """What a request of `principal` is counted against: its tenant's
        limits first (they have no request rate, so a key's refusal after
        them leaves nothing counted there), then its key's; each with the
        word its refusal names."""
        assert principal.key_id is not None
        tenant = self.tenant_limits(principal.tenant)
        counters = [(tenant_counter(principal.tenant), tenant, "tenant")] if tenant.any else []
        if principal.limits.any:
            counters.append((principal.key_id, principal.limits, "key"))
        return counters

    def applies(self, principal: Principal) -> bool:
        """Whether the principal has limits of its key's or its tenant's."""
        return principal.key_id is not None and bool(self._counters(principal))

    async def admit(
        self, principal: Principal, tokens: int, parts: int = 1, output: int = 0
    ) -> Admission:
        """Reserve one request and `tokens` for the principal's tenant and
        key, or raise 429. `parts`: how many streams report into the
        admission; `output`: how much of `tokens` is output (not charged
        unless generated)."""
        now = self._clock()
        admission = Admission(self, principal, [], tokens, parts, {}, output=output)
        for counter, counter_limits, holder in self._counters(principal):

            def decide(usage: Usage, counter_limits: Limits = counter_limits) -> Usage | None:
                decision = limits.admit(counter_limits, usage, now, tokens)
                return decision.usage if decision.admitted else None

            lease_id = uuid.uuid4().hex
            seen = await self._store.admit(counter, lease_id, now, now + self._lease_s, decide)
            # The same pure function on the same inputs: the decision the store applied.
            decision = limits.admit(counter_limits, seen, now, tokens, holder)
            if not decision.admitted:
                admission.release()  # what the counters before this one reserved
                _raise_refused(principal, decision)
            admission.leases.append(Lease(counter, lease_id, decision.usage.window))
            found = limits.headers(counter_limits, decision.usage, now)
            admission.headers = limits.tightest(admission.headers, found)
        return admission

    async def check(self, principal: Principal) -> None:
        """429 if the tenant or key is already at its concurrency or the key
        at its request rate; reserves nothing (the admission does)."""
        now = self._clock()
        for counter, counter_limits, holder in self._counters(principal):
            usage = await self._store.usage(counter, now)
            _raise_refused(principal, limits.precheck(counter_limits, usage, now, holder))

    async def headers(self, principal: Principal) -> dict[str, str]:
        """Where the tenant and key stand now (for responses that reserve
        nothing): of each kind of limit, the one nearer its end."""
        now = self._clock()
        out: dict[str, str] = {}
        for counter, counter_limits, _ in self._counters(principal):
            usage = await self._store.usage(counter, now)
            out = limits.tightest(out, limits.headers(counter_limits, usage, now))
        return out

    def settle_later(self, admission: Admission, used: int) -> None:
        now = self._clock()
        if isinstance(self._store, LocalUsage):
            # Counters in this process: settled on the spot, no task (one a
            # request was a measurable share of what limits cost).
            for lease in admission.leases:
                self._store.settle_now(*self._settlement(admission, lease, used, now))
            return
        for lease in admission.leases:
            task = asyncio.create_task(self._settle(admission, lease, used))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)

    @staticmethod
    def _settlement(
        admission: Admission, lease: Lease, used: int, now: float
    ) -> tuple[str, str, float, Adjust]:
        """The key store's `settle` arguments for one lease of an admission."""
        window, reserved = lease.window, admission.reserved
        return (
            lease.counter,
            lease.lease_id,
            now,
            lambda usage: limits.settle(usage, now, window, reserved, used),
        )

    async def _settle(self, admission: Admission, lease: Lease, used: int) -> None:
        try:
            await self._store.settle(*self._settlement(admission, lease, used, self._clock()))
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
    """One admitted request's reservations, settled exactly once, when every
    one of its `parts` (streams) has ended, or at once by `release`."""

    limiter: Limiter
    principal: Principal
    leases: list[Lease]  # one per counter it reserved on: its tenant's, its key's
    reserved: int
    parts: int
    headers: dict[str, str]
    output: int = 0  # of `reserved`, the output caps
    used: int = 0
    settled: bool = False

    def __post_init__(self) -> None:
        self.share = self.reserved // max(1, self.parts)  # one part's reservation
        self.output_share = self.output // max(1, self.parts)

    def stream_ended(self, used: int | None, generated: int = 0) -> None:
        """One part's stream ended having used `used` tokens; None: it was
        dropped before its usage arrived (the client left), having been seen
        to generate `generated` tokens at least: it is charged its share of
        the reservation but the output it did not generate (the engine may
        have spent its prompt)."""
        if used is None:
            unspent = max(0, self.output_share - generated)
            used = self.share - unspent
        self.part_ended(used)

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
