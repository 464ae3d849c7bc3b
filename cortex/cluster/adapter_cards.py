"""The controller's adapter list (`neuraxis adapters list`'s, controller_adapters.py)
as the admin listener's GET /v1/adapters cards in cluster mode: every
adapter the controller serves, one no replica holds yet too, with its
base model, source and origin, and its replicas named by address, as the
listener names them with static neurons. Pure: the answer comes over Ray
as plain data (client.py asks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cortex.schemas.adapters import AdapterCard


def adapter_cards(listed: Mapping[str, Any]) -> list[AdapterCard]:
    """The cards of `listed`, by id; KeyError or TypeError for an answer
    not in this form (a controller of another version)."""
    addresses: Mapping[str, str] = listed["addresses"]

    def named(replicas: list[str]) -> list[str]:
        # A ready replica has an address; its id rather than nothing if not.
        return sorted(addresses.get(r, r) for r in replicas)

    return sorted(
        (
            AdapterCard(
                id=a["id"],
                parent=a["model"],
                held_by=named(a["held_by"]),
                source=a["source"],
                origin="run-time" if a["added_at_run_time"] else "spec",
                served_by=named(a["replicas"]),
            )
            for a in listed["adapters"]
        ),
        key=lambda card: card.id,
    )
