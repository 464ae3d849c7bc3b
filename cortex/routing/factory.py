"""Routing policies by name: the names a setting may use, the options they
take (cortex's [routing] settings), the factory, and the table of one policy
per model.

Kept apart from `policy.py` because it imports every policy module, while
each of those imports the interface.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from axon.settings import SettingsGroup
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


class PolicyOptions(SettingsGroup):
    """What the policies are tuned by."""

    epsilon: NonNegativeFloat = Field(
        0.5,
        description="prefix_affinity: no neuron takes more than (1 + epsilon) x the average load. "
        "0.5 from make bench-routing-sim (16 replicas, 64 prompt groups, overflow keeping the "
        "prefix homed, 0.25/0.5/1.0 alternating in one run): groups TTFT p50 47 ms (0.25: 66, "
        "1.0: 65), p90 363 ms (510, 426), output tokens/s 649 (542, 608), replica shares within "
        "1.06x the average (1.09x, 1.23x); one hot prefix's TTFT p90 129 ms (106, 95) against "
        "least_outstanding's 114, within run-to-run noise at that load (the home's bound is 3 "
        "requests for both 0.25 and 0.5 there)",
    )
    block_bytes: PositiveInt = Field(
        256, description="prefix_affinity: size of one hashed block of the prompt prefix"
    )
    max_blocks: PositiveInt = Field(
        32, description="prefix_affinity: how many prefix blocks are hashed per request"
    )
    load_max_age_s: PositiveFloat = Field(
        2.0,
        description="an engine load report older than this is ignored by the routing policies (s)",
    )
    kv_limit: PositiveFloat = Field(
        0.8,
        le=1,
        description="a neuron whose engine reports this share of its KV cache in use is "
        "avoided while another is not",
    )
    seed: int | None = Field(
        None, description="power_of_two: a fixed seed for its random draws (reproducible runs)"
    )
    adapter_affinity: bool = Field(
        True,
        description="a LoRA adapter's request goes to a replica that holds the adapter when "
        "one is within the load bound (epsilon), else to one with a free adapter slot, else to "
        "the one whose adapter to evict is asked for least lately; false: adapter-blind, "
        "routed as its base model's (for comparison: make bench-lora)",
    )


class RoutingSettings(PolicyOptions):
    """Which policy chooses a model's neuron, and its tuning."""

    policy: PolicyName = Field(
        DEFAULT_POLICY,
        description="how a neuron is chosen for a request: least_outstanding, power_of_two "
        "(the less loaded of two random neurons) or prefix_affinity (where the prompt's "
        "prefix is likely cached, under a load bound)",
    )
    models: dict[str, PolicyName] = Field(
        default_factory=dict,
        description="a routing policy per model, overriding policy and the deployment "
        'spec\'s per-model routing: {"model-id": "power_of_two"}',
    )

    def table(self, spec_routing: Mapping[str, PolicyName] | None = None) -> PolicyTable:
        """The policies these settings ask for, one per model: `models`,
        then the deployment spec's per-model `routing` (`spec_routing`),
        then `policy`. The more specific setting wins, and of two per-model
        ones this instance's own: the spec is shared by every cortex,
        `models` is one instance's deliberate override."""
        return PolicyTable(self.policy, {**(spec_routing or {}), **self.models}, self)


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
