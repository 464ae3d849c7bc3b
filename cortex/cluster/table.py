"""The endpoint table: the ready replicas cortex routes to, with a version
that grows with each change, and a long poll for the next version.

The controller publishes; cortex's follower (client.follow_table) waits.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    def __init__(self) -> None:
        self.version = 0
        self.endpoints: list[Endpoint] = []
        self._changed = asyncio.Condition()

    async def publish(self, endpoints: list[Endpoint]) -> None:
        """A new table; the version moves (and waiters wake) only when it differs."""
        if endpoints == self.endpoints:
            return
        async with self._changed:
            self.endpoints = endpoints
            self.version += 1
            self._changed.notify_all()

    async def wait(self, known_version: int, timeout_s: float) -> dict[str, Any]:
        """The table as plain data, once its version is newer than
        `known_version` or after `timeout_s`."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.version > known_version), timeout_s
                )
            return {"version": self.version, "replicas": [e.to_dict() for e in self.endpoints]}
