"""Routing policies by name: the names a setting may use, the options they
take, the factory, and the table of one policy per model.

Kept apart from `policy.py` because it imports every policy module, while
each of those imports the interface.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.policy import RoutingPolicy
from cortex.routing.power_of_two import PowerOfTwo
from cortex.routing.prefix import PrefixHasher
from cortex.routing.prefix_affinity import PrefixAffinity


class PolicyName(enum.StrEnum):
    LEAST_OUTSTANDING = "least_outstanding"
    POWER_OF_TWO = "power_of_two"
    PREFIX_AFFINITY = "prefix_affinity"


# prefix_affinity: on two real replicas (`make bench-routing`, 16 groups
# sharing long system prompts) its TTFT p50 was 9.4x lower and its output
# tokens/s 2.2x higher than least_outstanding's, with the replicas' shares
# even; with one hot prefix its TTFT p90 was 0.61x; on 16 simulated replicas
# 8.6x and 0.79x. A request without a shared prefix costs it nothing: prompts
# that share nothing spread by the homes and load bounds, requests with no
# prompt (embeddings) go to the least loaded (docs/performance.md).
DEFAULT_POLICY = PolicyName.PREFIX_AFFINITY


@dataclass(frozen=True)
class PolicyOptions:
    """What the policies are tuned by (cortex's `routing_*` settings)."""

    epsilon: float = 0.25  # prefix_affinity: a neuron takes <= (1 + epsilon) x average
    block_bytes: int = 256  # prefix_affinity: the size of one hashed prefix block
    max_blocks: int = 32  # prefix_affinity: blocks hashed per request
    load_max_age_s: float = 2.0  # an engine load report older than this is ignored
    kv_limit: float = 0.8  # KV-cache usage at which a neuron counts as saturated
    seed: int | None = None  # power_of_two: a fixed seed for its draws (tests)


_BUILDERS: dict[PolicyName, Callable[[PolicyOptions], RoutingPolicy]] = {
    PolicyName.LEAST_OUTSTANDING: lambda _: LeastOutstanding(),
    PolicyName.POWER_OF_TWO: lambda o: PowerOfTwo(
        load_max_age_s=o.load_max_age_s, kv_limit=o.kv_limit, rng=random.Random(o.seed)
    ),
    PolicyName.PREFIX_AFFINITY: lambda o: PrefixAffinity(
        epsilon=o.epsilon,
        hasher=PrefixHasher(o.block_bytes, o.max_blocks),
        load_max_age_s=o.load_max_age_s,
        kv_limit=o.kv_limit,
    ),
}


def policy_name(name: str) -> PolicyName:
    """`name` as a PolicyName; ValueError names the known ones."""
    try:
        return PolicyName(name)
    except ValueError:
        known = ", ".join(p.value for p in PolicyName)
        raise ValueError(f"unknown routing policy {name!r}; known: {known}") from None


def make_policy(name: str = DEFAULT_POLICY, options: PolicyOptions | None = None) -> RoutingPolicy:
    """A new policy (its own state) of the named kind; ValueError names the
    known ones when `name` is not one of them."""
    return _BUILDERS[policy_name(name)](options or PolicyOptions())


@dataclass
class PolicyTable:
    """One policy per model: `default` unless `per_model` names another.
    Each model gets its own instance, made on first use, so that one model's
    traffic does not shape another's ring or counts."""

    default: str = DEFAULT_POLICY
    per_model: Mapping[str, str] = field(default_factory=dict)
    options: PolicyOptions = field(default_factory=PolicyOptions)
    _policies: dict[str, RoutingPolicy] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # Refuse a bad name when the table is built, not at the first request.
        for name in [self.default, *self.per_model.values()]:
            policy_name(name)

    def for_model(self, model: str) -> RoutingPolicy:
        policy = self._policies.get(model)
        if policy is None:
            policy = make_policy(self.per_model.get(model, self.default), self.options)
            self._policies[model] = policy
        return policy
