"""What admission needs to know of a tenant: its weight in the fair queue,
the highest priority class it may use, and its tenant-wide bounds. A tenant
without a row gets `DEFAULT_POLICY` (weight 1, the default class).

Admission reads policies through `TenantPolicies`, a synchronous look-up, so
the queue never waits on a store: the store-backed implementation keeps the
rows in memory and refreshes them in the background. `FixedTenantPolicies`
is the one used where there is no store to read (auth off) and in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from axon.priority import DEFAULT_CLASS, PriorityClass


@dataclass(frozen=True)
class TenantPolicy:
    weight: float = 1.0
    max_priority: PriorityClass = DEFAULT_CLASS
    max_concurrent: int | None = None
    tpm: int | None = None


DEFAULT_POLICY = TenantPolicy()


class TenantPolicies(Protocol):
    def policy(self, tenant: str) -> TenantPolicy: ...


class FixedTenantPolicies:
    """Policies that never change: the given rows, `default` for the rest."""

    def __init__(
        self,
        rows: Mapping[str, TenantPolicy] | None = None,
        default: TenantPolicy = DEFAULT_POLICY,
    ) -> None:
        self._rows = dict(rows or {})
        self._default = default

    def policy(self, tenant: str) -> TenantPolicy:
        return self._rows.get(tenant, self._default)
