"""The principal a batch's lines run for, kept with the batch: the tenant,
key, models and limits of the key that created it, as they were then (a
batch resumed after a restart runs under the same)."""

from __future__ import annotations

from typing import Any

from cortex.auth.limits import Limits
from cortex.auth.principal import Principal


def to_json(principal: Principal) -> dict[str, Any]:
    limits = principal.limits
    return {
        "tenant": principal.tenant,
        "key_id": principal.key_id,
        "models": sorted(principal.models),
        "limits": {"rpm": limits.rpm, "tpm": limits.tpm, "max_concurrent": limits.max_concurrent},
    }


def from_json(value: dict[str, Any]) -> Principal:
    return Principal(
        tenant=value["tenant"],
        key_id=value.get("key_id"),
        models=frozenset(value.get("models", ())),
        limits=Limits(**value.get("limits", {})),
    )
