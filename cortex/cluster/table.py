"""The endpoint table: the ready replicas cortex routes to, and every LoRA
adapter the controller serves with its base model (the spec's and those
added at run time: cortex wakes an adapter's base when it is scaled to
zero, and forgets a removed one), with a version that grows with each
change, and a long poll for the next version.

The controller publishes; cortex's follower (client.follow_table) waits.
Each controller's table has its own `epoch`: a controller that comes back
starts again from version 0, and a follower that knew another epoch gets
the new table as soon as it has one. Version 0 means nothing was published
yet (a controller still adopting): a follower keeps its last table then.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    replica: str
    model: str
    address: str
    generation: str | None
    metrics_port: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "model": self.model,
            "address": self.address,
            "generation": self.generation,
            "metrics_port": self.metrics_port,
        }


@dataclass(frozen=True)
class TableView:
    """The table as cortex's follower reads it off the wire."""

    epoch: str | None
    version: int
    addresses: list[str]
    # Replicas the controller adopted when it started (the actor adds it).
    adopted: int
    # Adapter id -> base model id; None from a controller that does not say
    # (another version): cortex keeps what it knew.
    adapters: dict[str, str] | None

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> TableView:
        """TypeError or KeyError for a table not in this form."""
        adapters = data.get("adapters")
        if adapters is not None and not (
            isinstance(adapters, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in adapters.items())
        ):
            raise TypeError(f"the table's adapters are not id -> model: {adapters!r}")
        return cls(
            epoch=data.get("epoch"),
            version=int(data["version"]),
            addresses=[str(r["address"]) for r in data["replicas"]],
            adopted=int(data.get("adopted", 0)),
            adapters=None if adapters is None else dict(adapters),
        )


class EndpointTable:
    def __init__(self, epoch: str | None = None) -> None:
        self.epoch = epoch or uuid.uuid4().hex
        self.version = 0
        self.endpoints: list[Endpoint] = []
        self.adapters: dict[str, str] = {}
        self._changed = asyncio.Condition()

    async def publish(
        self, endpoints: list[Endpoint], adapters: Mapping[str, str] | None = None
    ) -> None:
        """A new table (`adapters`: id -> base model; None: as they were);
        the version moves (and waiters wake) only when it differs, or on the
        first publication: an empty first table still tells cortex that the
        controller has adopted what runs (cortex is ready with it, before
        any replica is)."""
        served = self.adapters if adapters is None else dict(adapters)
        if endpoints == self.endpoints and served == self.adapters and self.version > 0:
            return
        async with self._changed:
            self.endpoints = endpoints
            self.adapters = served
            self.version += 1
            self._changed.notify_all()

    async def wait(
        self, known_version: int, timeout_s: float, known_epoch: str | None = None
    ) -> dict[str, Any]:
        """The table as plain data, once its version is newer than
        `known_version` (of `known_epoch`; any published version when that
        is another epoch) or after `timeout_s`."""

        def newer() -> bool:
            if known_epoch is not None and known_epoch != self.epoch:
                return self.version > 0
            return self.version > known_version

        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(newer), timeout_s)
            return {
                "epoch": self.epoch,
                "version": self.version,
                "replicas": [e.to_dict() for e in self.endpoints],
                "adapters": dict(self.adapters),
            }
