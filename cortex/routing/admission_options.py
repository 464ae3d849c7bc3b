"""Admission control's settings (`[admission]`; docs/deploy.md, "Admission
control" and "Fair sharing"): the replica caps, the per-model queue, the
order of the queue and the tenants' policies when no store gives them.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

from axon.priority import DEFAULT_CLASS, PriorityClass
from axon.settings import SettingsGroup
from cortex.routing.class_slots import BatchRules
from cortex.routing.tenant_policy import FixedTenantPolicies, TenantPolicy

# The tenant of every request when auth is off: the only tenant there is,
# so it is never held to a share of the queue kept free for others.
ANONYMOUS_TENANT = ""


class StaticTenant(BaseModel):
    """One tenant's policy written in the settings (`[admission.tenants.NAME]`)."""

    model_config = ConfigDict(extra="forbid")

    weight: PositiveFloat = Field(
        1.0, description="its share of a busy model's tokens, relative to the other tenants"
    )
    max_priority: PriorityClass = Field(
        DEFAULT_CLASS, description="the highest priority class its requests may use"
    )


class AdmissionOptions(SettingsGroup):
    """Replica caps and the per-model queue
    (docs/deploy.md, "Admission control")."""

    replica_max_concurrency: int = Field(
        0,
        ge=-1,
        description="requests one replica takes at once; more wait in the model's admission "
        "queue. 0: the batch size its engine reports (vLLM's max_num_seqs; no cap if it "
        "reports none); -1: no caps, no queue",
    )
    queue_size: NonNegativeInt = Field(
        256,
        description="requests per model that may wait for a replica slot; past it a request "
        "gets 503 model_overloaded at once",
    )
    queue_timeout_s: PositiveFloat = Field(
        30.0,
        description="how long a request may wait for a replica slot before it gets 503 "
        "model_overloaded (s)",
    )
    fair_queuing: bool = Field(
        True,
        description="order a model's waiting requests by priority class, then across tenants "
        "by weighted fair queuing over tokens; false: first come, first served",
    )
    tenant_queue_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="with fair queuing, the share of a model's queue (queue_size) one tenant "
        "of weight 1 may fill, times its weight (at most all of it); past it that tenant's "
        "requests get 503 model_overloaded, and the rest stays free for the other tenants",
    )
    batch_reserved_slots: NonNegativeInt = Field(
        1,
        description="with fair queuing, slots per ready replica of a model that batch-class "
        "requests may not take: kept for the classes above, so that one arriving at replicas "
        "full of batch work is dispatched at once (one batch request may always run)",
    )
    batch_trickle_slots: PositiveInt = Field(
        1,
        description="with fair queuing, batch-class requests per ready replica of a model "
        "while requests of a higher class run or wait on it (each adds to their latency in "
        "the engine); with none there, batch fills the slots less batch_reserved_slots",
    )
    slot_hold_ms: float = Field(
        50.0,
        ge=0,
        description="with fair queuing, how long a slot stays kept for the tenant whose "
        "request just freed it, when other tenants wait and that tenant's next request would "
        "go first: a client sending one request after another keeps its place instead of "
        "waiting for another slot to free (ms; 0: no holds). Not for batch-class requests",
    )
    tenants: dict[str, StaticTenant] = Field(
        default_factory=dict,
        description="tenants' weights and highest priority classes, by tenant name, where no "
        "tenants store gives them; a tenant not listed has weight 1 and class default",
    )

    @property
    def enabled(self) -> bool:
        return self.replica_max_concurrency >= 0

    def cap(self, reported: int) -> int | None:
        """A replica's cap, given what its neuron reported (0: nothing)."""
        if self.replica_max_concurrency > 0:
            return self.replica_max_concurrency
        if self.replica_max_concurrency == 0 and reported > 0:
            return reported
        return None

    def tenant_bound(self, tenant: str, weight: float) -> int:
        """How many of `tenant`'s requests may wait for one model."""
        if not self.fair_queuing or tenant == ANONYMOUS_TENANT:
            return self.queue_size
        return math.ceil(self.queue_size * min(1.0, self.tenant_queue_share * weight))

    def batch_rules(self) -> BatchRules:
        return BatchRules(self.batch_reserved_slots, self.batch_trickle_slots)

    def static_policies(self) -> FixedTenantPolicies:
        """The policies of `tenants`."""
        return FixedTenantPolicies(
            {
                name: TenantPolicy(weight=row.weight, max_priority=row.max_priority)
                for name, row in self.tenants.items()
            }
        )
