"""The seam between the controller and the cluster it runs on.

`ClusterBackend` is everything the controller asks of the cluster: the nodes,
creating a replica where placement asked, starting its neuron, checking it,
draining and killing it, its neuron's LoRA adapters (listed, loaded,
unloaded), and what must outlive a controller (the node marks, the run-time
adapter changes). It speaks the plain-data types below, keyed by the
replica's id (which is also the name of its actor in Ray, so that a later
controller can find replicas it did not start: `replicas()` lists them, with
what each replica's actor recorded of itself, for the controller to adopt).
`ray_backend.RayBackend` is the real one; the unit tests drive the
controller with a fake.

What does not live here: the decisions (decisions.py), the controller's
bookkeeping (controller.py), and anything that imports Ray (ray_backend.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from axon.generations import Generation
from cortex.cluster.nodes import NodeMark
from cortex.cluster.placement import NodeView


class ReplicaStartError(Exception):
    """A replica could not be placed or its neuron did not start; the message
    says why (with the neuron's last log lines when it ran at all)."""


@dataclass(frozen=True)
class ReplicaRequest:
    """A replica to create: its id, model, GPUs, the generation label selector
    and a preferred node (a soft wish; the backend may place it elsewhere)."""

    replica_id: str
    model: str
    serial: int  # the order of creation, kept by the replica for a later controller
    gpus: int
    label_selector: dict[str, str]
    preferred_node: str | None
    # Only the preferred node will do: while some nodes are cordoned, a soft
    # wish could land the replica on one of them.
    pinned: bool = False


@dataclass(frozen=True)
class Placed:
    """Where the backend put a replica."""

    node_id: str
    host: str
    generation: Generation | None


@dataclass(frozen=True)
class Started:
    """A replica whose neuron answers SERVING."""

    address: str
    metrics_port: int
    pid: int
    log: str


@dataclass(frozen=True)
class RunningReplica:
    """A replica found running in the cluster, as its actor recorded itself:
    enough for a controller that did not start it to adopt it. `started`
    is None while its neuron has not reported SERVING yet."""

    replica_id: str
    model: str
    serial: int
    node_id: str
    host: str
    generation: Generation | None
    created: float  # wall time the actor was created
    started: Started | None = None
    started_at: float | None = None  # wall time its neuron reported SERVING

    @property
    def address(self) -> str | None:
        return self.started.address if self.started else None


class Liveness(Enum):
    GONE = "gone"  # the replica's actor is gone (killed, or its node left)
    EXITED = "exited"  # the actor runs but its neuron process exited
    NOT_SERVING = "not_serving"  # the neuron runs but its health check fails
    SERVING = "serving"


@dataclass(frozen=True)
class Health:
    """One health check of a replica. `detail` says why when it is not
    SERVING; `running` and `waiting` are the engine's requests, when they
    could be read."""

    liveness: Liveness
    detail: str = ""
    running: int | None = None
    waiting: int | None = None


@dataclass(frozen=True)
class ReplicaAdapters:
    """A replica's LoRA adapters, as its neuron's Info says: the ones it
    serves (its catalogue) and the ones its engine holds now."""

    served: tuple[str, ...]
    held: tuple[str, ...]


class ClusterBackend(Protocol):
    async def nodes(self) -> list[NodeView]:
        """Every node the cluster knows, alive or not."""
        ...

    async def replicas(self) -> list[RunningReplica]:
        """The replicas running in the cluster, whoever started them; after
        this, `check`, `drain` and `kill` work on them. A replica actor that
        does not answer is killed here and left out."""
        ...

    def create(self, request: ReplicaRequest) -> None:
        """Ask for a replica to be placed; returns at once (`placed` waits)."""
        ...

    async def placed(self, replica_id: str) -> Placed:
        """Wait until the replica has a node; ReplicaStartError if it cannot."""
        ...

    async def start(self, replica_id: str, env: dict[str, str], timeout_s: float) -> Started:
        """Start the replica's neuron with these environment variables (its
        serialised settings); ReplicaStartError when it does not come up."""
        ...

    async def check(self, replica_id: str) -> Health:
        """One health check; never raises."""
        ...

    async def drain(self, replica_id: str, timeout_s: float) -> None:
        """SIGTERM the neuron and wait (up to `timeout_s`) for its in-flight
        requests to finish and the process to exit; never raises."""
        ...

    def kill(self, replica_id: str) -> None:
        """Release the replica (its actor, its neuron, its connections) at
        once; a no-op for an unknown id."""
        ...

    async def load_marks(self) -> dict[str, NodeMark]:
        """The cordoned and draining nodes, as the last controller saved them."""
        ...

    async def save_marks(self, marks: dict[str, NodeMark]) -> None:
        """Keep the node marks where the next controller finds them."""
        ...

    async def adapters(self, replica_id: str) -> ReplicaAdapters:
        """The replica's adapters now; a NeuraxisError when its neuron does
        not answer."""
        ...

    async def load_adapter(self, replica_id: str, adapter_id: str, source: str) -> None:
        """Have the replica's neuron serve an adapter (loaded now); the
        neuron's refusal as a NeuraxisError."""
        ...

    async def unload_adapter(self, replica_id: str, adapter_id: str) -> None:
        """Have the replica's neuron serve an adapter no more, once its
        requests there have ended; a NeuraxisError when it cannot."""
        ...

    async def load_adapter_changes(self) -> dict[str, Any] | None:
        """The run-time adapter changes (adapter_changes.py) as the last
        controller saved them; None if none ever did."""
        ...

    async def save_adapter_changes(self, changes: dict[str, Any]) -> None:
        """Keep the run-time adapter changes where the next controller finds them."""
        ...
