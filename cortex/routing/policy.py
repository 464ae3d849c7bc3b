"""The routing-policy interface and the read-only views a policy decides on.

A policy chooses one neuron for one attempt of one request. It decides and
does nothing else: the pool (`pool.py`) owns membership, health, the
outstanding counts, retries and retirement, and hands a policy only the
candidates that may take the attempt right now (ready, serving the model,
not already tried by this request). Health and load are therefore inputs,
never something a policy re-derives; a policy never calls a neuron.

    RoutingPolicy.select(candidates, request) -> one of candidates
    RoutingPolicy.choose(candidates, request) -> Choice: the candidate and
        the kind of decision it was (`Decision`), for the metrics; a policy
        that only balances load keeps the default (`balanced`)
    RoutingPolicy.on_dispatch / on_complete   no-op hooks for stateful policies

What lives here: the interface, the candidate view (`Candidate`, with an
optional engine load and the time it was measured), the request view
(`RouteRequest`, with optional affinity `RouteHints`), the kind of a
decision (`Decision`) and the outcome a completion hook receives. Each
policy lives in its own module (`least_outstanding.py`, `power_of_two.py`,
`prefix_affinity.py`); `factory.py` builds one by name.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from cortex.routing.admission_wait import AdmissionWait
from cortex.routing.prefix import PrefixHasher


@dataclass(frozen=True)
class EngineLoad:
    """What a neuron's engine said about its own load (the `Load` RPC), and
    when, on the pool's clock. Other cortex instances route to the same
    engines, so this sees load that the outstanding count cannot."""

    running: int
    waiting: int
    measured_at: float
    kv_cache_usage: float | None = None  # 0..1, when the engine reports it
    # This cortex's outstanding count when the report arrived, when the pool
    # knows it: the engine's count minus this is what *other* senders have
    # on it (`load.effective_load`). Not part of equality: it is bookkeeping
    # about the report, not what the engine said.
    own: int | None = field(default=None, compare=False)

    def age(self, now: float) -> float:
        return now - self.measured_at

    def fresh(self, now: float, max_age_s: float) -> bool:
        """Whether the value is recent enough to trust (a stale load would
        keep steering traffic away from a neuron that has since emptied)."""
        return self.age(now) <= max_age_s


@dataclass(frozen=True)
class Candidate:
    """One neuron that may take the attempt, as the policy sees it."""

    address: str
    # Requests this cortex has dispatched to the neuron and not yet seen
    # end, counted from the moment of dispatch (counting at the first token
    # would send a burst to one neuron).
    outstanding: int
    load: EngineLoad | None = None


@dataclass(frozen=True)
class RouteHints:
    """Optional affinity keys a request carries; a policy may ignore them."""

    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    # Who the request acts for (its principal's tenant): its share in the
    # admission queue. "" is the anonymous tenant (auth off).
    tenant: str = ""
    # Told how long the request waited in the admission queue (for its
    # ledger row); None: nobody asks. Not a hint: left out of comparisons
    # and the hash (it changes while the request waits).
    waited: AdmissionWait | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RouteRequest:
    """The request being routed, as the policy sees it."""

    model: str
    request_id: str
    # The pool's clock at the decision, so that a policy can judge the age
    # of an EngineLoad without reading a clock of its own.
    now: float
    hints: RouteHints = field(default_factory=RouteHints)
    attempt: int = 0  # 0 for the first dispatch, n for the n-th retry
    # The chained hashes of the prompt's prefix blocks (`prefix.py`), made by
    # the pool only for a policy with a `prefix_hasher`; empty otherwise.
    prefix: tuple[int, ...] = ()


class Decision(enum.StrEnum):
    """Why a policy chose the candidate it did: a metrics label (requests per
    replica per decision), so a closed, small set."""

    # Affinity policies: a hit on the preferred neuron...
    CHAIN = "chain"  # ...that served the previous response of the chain
    PREFIX = "prefix"  # ...that was last sent the longest known block of the prefix
    HOME = "home"  # ...the ring's home for a prefix this policy has not seen
    # The preferred neuron or the ring's home was over the load bound (or its
    # KV cache full): the walk went on to another neuron.
    OVERFLOW = "overflow"
    # Nothing to prefer (no prefix, e.g. embeddings): the least loaded neuron.
    FALLBACK = "fallback"
    # A load-only policy's choice (least_outstanding, power_of_two).
    BALANCED = "balanced"


@dataclass(frozen=True)
class Choice:
    """A policy's answer: one of the candidates, and the kind of decision."""

    candidate: Candidate
    decision: Decision


class Outcome(enum.Enum):
    """How an attempt ended, for `RoutingPolicy.on_complete`."""

    OK = "ok"  # the neuron answered (a request it rejected counts: it answered)
    FAILED = "failed"  # the neuron failed it (unreachable, internal error)
    CANCELLED = "cancelled"  # the caller stopped before the end


class RoutingPolicy(ABC):
    """Chooses a neuron for each attempt. A policy may keep state (a hash
    ring, a rotation); the hooks tell it what happened to its choices."""

    # Set by a policy that routes on the prompt's prefix: the pool then hashes
    # each generation request with it into `RouteRequest.prefix`.
    prefix_hasher: PrefixHasher | None = None
    # The policy's setting name (a metrics label) and the kinds of decision it
    # makes, which the pool exports at 0 before the first request.
    name: ClassVar[str] = "custom"
    decisions: ClassVar[tuple[Decision, ...]] = (Decision.BALANCED,)

    @abstractmethod
    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        """One of `candidates` (never empty), by identity: the pool dispatches
        to the candidate object returned."""

    def choose(self, candidates: Sequence[Candidate], request: RouteRequest) -> Choice:
        """`select`, with the kind of decision it was. The pool calls this; a
        policy that only balances load keeps this default."""
        return Choice(self.select(candidates, request), Decision.BALANCED)

    # The hooks are no-ops on purpose (B027): a stateless policy overrides
    # neither.
    def on_dispatch(self, candidate: Candidate, request: RouteRequest) -> None:  # noqa: B027
        """The attempt was sent to `candidate`."""

    def on_complete(  # noqa: B027
        self, address: str, request: RouteRequest, outcome: Outcome
    ) -> None:
        """The attempt on `address` ended."""
