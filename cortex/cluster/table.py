"""The endpoint table: the ready replicas cortex routes to, with a version
that grows with each change, and a long poll for the next version.

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


class EndpointTable:
    def __init__(self, epoch: str | None = None) -> None:
        self.epoch = epoch or uuid.uuid4().hex
        self.version = 0
        self.endpoints: list[Endpoint] = []
        self._changed = asyncio.Condition()

    async def publish(self, endpoints: list[Endpoint]) -> None:
        """A new table; the version moves (and waiters wake) only when it
        differs, or on the first publication: an empty first table still tells
        cortex that the controller has adopted what runs (cortex is ready
        with it, before any replica is)."""
        if endpoints == self.endpoints and self.version > 0:
            return
        async with self._changed:
            self.endpoints = endpoints
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
            }
