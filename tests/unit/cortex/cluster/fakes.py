"""Honest fakes for driving the controller: a cluster backend that keeps its
replicas in dicts (the clock is harness.clock.ManualClock)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from axon.errors import InvalidRequestError, ModelNotFoundError, NeuraxisError, UnavailableError
from axon.generations import Generation
from cortex.cluster.backend import (
    Health,
    Liveness,
    Placed,
    ReplicaAdapters,
    ReplicaRequest,
    ReplicaStartError,
    RunningReplica,
    Started,
)
from cortex.cluster.nodes import NodeMark
from cortex.cluster.placement import NodeView
from harness.clock import ManualClock


def node(node_id: str, generation: Generation, gpus: int = 1, alive: bool = True) -> NodeView:
    return NodeView(node_id, f"10.0.0.{len(node_id)}", generation, gpus, alive)


@dataclass
class FakeReplica:
    request: ReplicaRequest
    node_id: str | None
    created: float
    env: dict[str, str] = field(default_factory=dict)
    started: Started | None = None
    started_at: float | None = None
    # The adapters its neuron serves (id -> source), from its settings at
    # start and the load / unload calls since.
    adapters: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str | None:
        return self.started.address if self.started else None


class FakeBackend:
    def __init__(self, nodes: list[NodeView], clock: ManualClock | None = None) -> None:
        self.node_list = nodes
        self.clock = clock or ManualClock()
        # How long a neuron takes to start, on the clock.
        self.start_s = 0.0
        self.actors: dict[str, FakeReplica] = {}
        self.created: list[ReplicaRequest] = []
        self.started: list[str] = []
        self.killed: list[str] = []
        self.drained: list[str] = []
        # Per replica id: what its next checks answer (default SERVING).
        self.health: dict[str, Health] = {}
        # Per model id: the error its starts fail with.
        self.start_errors: dict[str, str] = {}
        # While set, checks wait for it before answering (a check in flight).
        self.check_gate: asyncio.Event | None = None
        # The node marks saved in the cluster (they outlive a controller).
        self.marks: dict[str, NodeMark] = {}
        # The run-time adapter changes saved in the cluster (they outlive a
        # controller too), and every adapter call, in order.
        self.adapter_changes: dict[str, Any] | None = None
        self.adapter_calls: list[tuple[str, str, str]] = []
        # Per replica id: the error its neuron answers adapter calls with.
        self.adapter_errors: dict[str, NeuraxisError] = {}
        self._ports = iter(range(50051, 60000))

    async def nodes(self) -> list[NodeView]:
        return list(self.node_list)

    async def replicas(self) -> list[RunningReplica]:
        """Every replica still here, as its actor would describe itself (the
        fake's replicas outlive the controller that created them, as
        detached actors do)."""
        return [self._describe(r) for r in self.actors.values() if r.node_id is not None]

    def _describe(self, replica: FakeReplica) -> RunningReplica:
        where = next(n for n in self.node_list if n.node_id == replica.node_id)
        return RunningReplica(
            replica_id=replica.request.replica_id,
            model=replica.request.model,
            serial=replica.request.serial,
            node_id=where.node_id,
            host=where.host,
            generation=where.generation,
            created=replica.created,
            started=replica.started,
            started_at=replica.started_at,
        )

    def create(self, request: ReplicaRequest) -> None:
        self.created.append(request)
        self.actors[request.replica_id] = FakeReplica(
            request, self._place(request), self.clock.time()
        )

    def _place(self, request: ReplicaRequest) -> str | None:
        """The preferred node, or else the first live node the label selector
        allows (as Ray's SPREAD would, on a cluster with room)."""
        if request.preferred_node is not None:
            return request.preferred_node
        allowed = next(iter(request.label_selector.values()))[3:-1].split(",")
        fits = [
            n for n in self.node_list if n.alive and n.generation and n.generation.value in allowed
        ]
        return fits[0].node_id if fits else None

    async def placed(self, replica_id: str) -> Placed:
        node_id = self.actors[replica_id].node_id
        found = next((n for n in self.node_list if n.node_id == node_id), None)
        if found is None:
            raise ReplicaStartError("no node")
        return Placed(found.node_id, found.host, found.generation)

    async def start(self, replica_id: str, env: dict[str, str], timeout_s: float) -> Started:
        replica = self.actors[replica_id]
        replica.env = env
        if self.start_s:
            await self.clock.sleep(self.start_s)
        error = self.start_errors.get(replica.request.model)
        if error is not None:
            raise ReplicaStartError(error)
        port = next(self._ports)
        adapters = json.loads(env.get("NEURAXIS_NEURON_ADAPTERS", "[]"))
        replica.adapters = dict(a.split("=", 1) for a in adapters)
        self.started.append(replica_id)
        replica.started = Started(f"127.0.0.1:{port}", port + 1000, port, f"/logs/{replica_id}.log")
        replica.started_at = self.clock.time()
        return replica.started

    async def check(self, replica_id: str) -> Health:
        if self.check_gate is not None:
            await self.check_gate.wait()
        if replica_id not in self.actors:
            return Health(Liveness.GONE, "RayActorError")
        return self.health.get(replica_id, Health(Liveness.SERVING, running=0, waiting=0))

    async def drain(self, replica_id: str, timeout_s: float) -> None:
        self.drained.append(replica_id)

    def kill(self, replica_id: str) -> None:
        if self.actors.pop(replica_id, None) is not None:
            self.killed.append(replica_id)

    async def load_marks(self) -> dict[str, NodeMark]:
        return dict(self.marks)

    async def save_marks(self, marks: dict[str, NodeMark]) -> None:
        self.marks = dict(marks)

    def _neuron(self, replica_id: str) -> FakeReplica:
        replica = self.actors.get(replica_id)
        if replica is None or replica.started is None:
            raise UnavailableError(f"replica {replica_id} has no neuron serving")
        error = self.adapter_errors.get(replica_id)
        if error is not None:
            raise error
        return replica

    async def adapters(self, replica_id: str) -> ReplicaAdapters:
        replica = self._neuron(replica_id)
        # The fake's engines hold every adapter they serve.
        return ReplicaAdapters(tuple(replica.adapters), tuple(replica.adapters))

    async def load_adapter(self, replica_id: str, adapter_id: str, source: str) -> None:
        self.adapter_calls.append(("load", replica_id, adapter_id))
        replica = self._neuron(replica_id)
        if "refused" in source:
            # As a neuron refuses an adapter it cannot load: still in its
            # catalogue (neuron/engine/adapters.py offers it first).
            replica.adapters[adapter_id] = source
            raise InvalidRequestError(f"{source} cannot be loaded", param="source")
        replica.adapters[adapter_id] = source

    async def unload_adapter(self, replica_id: str, adapter_id: str) -> None:
        self.adapter_calls.append(("unload", replica_id, adapter_id))
        replica = self._neuron(replica_id)
        if replica.adapters.pop(adapter_id, None) is None:
            raise ModelNotFoundError(f"The model '{adapter_id}' does not exist on this neuron.")

    async def load_adapter_changes(self) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.adapter_changes)) if self.adapter_changes else None

    async def save_adapter_changes(self, changes: dict[str, Any]) -> None:
        self.adapter_changes = json.loads(json.dumps(changes))
