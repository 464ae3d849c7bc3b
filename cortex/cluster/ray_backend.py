"""The controller on Ray: `RayBackend` (the `ClusterBackend` over Ray actors
and `ray.nodes()`) and `ControllerActor`, the named, detached actor that
holds a `Controller` over it.

A replica is a detached `ReplicaActor` (replica.py) named by its replica id
in the neuraxis namespace (so it outlives the controller, and the next one
finds it with `replicas()`), with `num_gpus`, the generation label selector and a
soft affinity to the node placement preferred (SPREAD when there is none).
Its neuron's gRPC health and load are read here too, so that the controller
sees one `Health` per check. Ray's errors become `ReplicaStartError` or a
GONE health here; the controller never sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import grpc
import ray
from ray.exceptions import RayError
from ray.experimental import internal_kv
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from axon.errors import NeuraxisError, UnavailableError, as_data
from axon.generations import GENERATION_LABEL, Generation
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
from cortex.cluster.clock import SystemClock
from cortex.cluster.controller import Controller, ControllerConfig
from cortex.cluster.nodes import NodeError, NodeMark
from cortex.cluster.placement import NodeView
from cortex.cluster.replica import ReplicaActor
from cortex.cluster.spec import DeploymentSpec
from cortex.cluster.status import CortexReport
from cortex.routing.client import NeuronClient, channel_credentials

log = logging.getLogger("neuraxis.controller")

CONTROLLER_NAME = "neuraxis-controller"
NAMESPACE = "neuraxis"
# The cordoned and draining nodes, in Ray's key-value store (the GCS).
MARKS_KEY = "node-marks"
# The adapters added and removed at run time (adapter_changes.py), there too.
ADAPTER_CHANGES_KEY = "adapter-changes"
# How long a neuron may take to load an adapter (vLLM reads its weights) or
# to unload one (its requests there end first), as cortex's pool allows.
ADAPTER_TIMEOUT_S = 120.0
# How long a replica's actor may take to answer a check before it counts as gone.
CHECK_TIMEOUT_S = 10.0
# How long the neuron's health and load calls may take.
PROBE_TIMEOUT_S = 2.0
# How long a replica found running may take to describe itself; one not yet
# placed does not answer at all, and is replaced.
DESCRIBE_TIMEOUT_S = 5.0

# Ray starts its workers at niceness 15 (`worker_niceness`), and a replica's
# neuron, engine core and model worker inherit it: on a busy host any process
# at the default priority then takes the CPU from the engine (vLLM's own
# server runs at 0). A replica serves: it runs at the default priority, as
# Ray's own job supervisor does with the same variable.
REPLICA_RUNTIME_ENV = {"env_vars": {"RAY_worker_niceness": "0"}}


class RayBackend:
    def __init__(self, credentials: grpc.ChannelCredentials | None = None) -> None:
        """`credentials`: the neurons' mutual TLS (cortex's files), or None."""
        self._credentials = credentials
        self._actors: dict[str, Any] = {}
        self._clients: dict[str, NeuronClient] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def nodes(self) -> list[NodeView]:
        return [_node_view(node) for node in ray.nodes()]

    def create(self, request: ReplicaRequest) -> None:
        # Soft: Ray still places it on another eligible node when this one is
        # full; SPREAD when every eligible node already holds a replica.
        strategy: Any = (
            NodeAffinitySchedulingStrategy(node_id=request.preferred_node, soft=not request.pinned)
            if request.preferred_node
            else "SPREAD"
        )
        self._actors[request.replica_id] = ReplicaActor.options(
            # Named and detached: the next controller finds and adopts it.
            name=request.replica_id,
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=0,
            num_gpus=request.gpus,
            label_selector=request.label_selector,
            scheduling_strategy=strategy,
            max_restarts=0,
            max_concurrency=16,
            runtime_env=REPLICA_RUNTIME_ENV,
        ).remote(request.replica_id, request.model, request.serial)

    async def replicas(self) -> list[RunningReplica]:
        names = _replica_names()
        found = await asyncio.gather(*(self._describe(name) for name in names))
        return [r for r in found if r is not None]

    async def _describe(self, name: str) -> RunningReplica | None:
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            return None  # gone since it was listed
        try:
            record: dict[str, Any] = await asyncio.wait_for(
                actor.describe.remote(), timeout=DESCRIBE_TIMEOUT_S
            )
        except (RayError, TimeoutError) as e:
            log.warning("replica actor %s does not answer (%s); killing it", name, type(e).__name__)
            with contextlib.suppress(RayError, ValueError):
                ray.kill(actor)
            return None
        self._actors[name] = actor
        started = record["started"]
        if started is not None:
            self._clients[name] = NeuronClient(started["address"], self._credentials)
        return _running(record)

    async def placed(self, replica_id: str) -> Placed:
        try:
            where = await self._actors[replica_id].where.remote()
        except RayError as e:
            raise ReplicaStartError(_cause(e)) from None
        label = where["labels"].get(GENERATION_LABEL)
        return Placed(where["node_id"], where["host"], _generation(label))

    async def start(self, replica_id: str, env: dict[str, str], timeout_s: float) -> Started:
        try:
            started = await self._actors[replica_id].start.remote(env, timeout_s)
        except RayError as e:
            raise ReplicaStartError(_cause(e)) from None
        self._clients[replica_id] = NeuronClient(started["address"], self._credentials)
        return _started(started)

    async def check(self, replica_id: str) -> Health:
        actor = self._actors.get(replica_id)
        client = self._clients.get(replica_id)
        if actor is None or client is None:
            return Health(Liveness.GONE, "not started by this controller")
        try:
            process = await asyncio.wait_for(actor.check.remote(), timeout=CHECK_TIMEOUT_S)
        except (RayError, TimeoutError) as e:
            return Health(Liveness.GONE, type(e).__name__)
        if not process["running"]:
            return Health(Liveness.EXITED, str(process["exit_code"]))
        if not await client.serving(timeout=PROBE_TIMEOUT_S):
            return Health(Liveness.NOT_SERVING, "health check not SERVING")
        try:
            load = await client.load(timeout=PROBE_TIMEOUT_S)
        except NeuraxisError:
            return Health(Liveness.SERVING)  # serving; its load is unknown this time
        return Health(Liveness.SERVING, running=load.running, waiting=load.waiting)

    async def drain(self, replica_id: str, timeout_s: float) -> None:
        actor = self._actors.get(replica_id)
        if actor is None:
            return
        try:
            await actor.drain.remote(timeout_s)
        except RayError as e:
            # Gone already: nothing left to drain.
            log.warning("replica %s could not be drained: %s", replica_id, _cause(e))

    async def load_marks(self) -> dict[str, NodeMark]:
        stored = internal_kv._internal_kv_get(MARKS_KEY, namespace=NAMESPACE)
        if not stored:
            return {}
        return {node: NodeMark(mark) for node, mark in json.loads(stored).items()}

    async def save_marks(self, marks: dict[str, NodeMark]) -> None:
        value = json.dumps({node: mark.value for node, mark in marks.items()})
        internal_kv._internal_kv_put(MARKS_KEY, value, namespace=NAMESPACE)

    def _client(self, replica_id: str) -> NeuronClient:
        client = self._clients.get(replica_id)
        if client is None:
            raise UnavailableError(f"replica {replica_id} has no neuron serving")
        return client

    async def adapters(self, replica_id: str) -> ReplicaAdapters:
        info = await self._client(replica_id).info(timeout=PROBE_TIMEOUT_S)
        served = tuple(m.id for m in info.models if m.parent)
        return ReplicaAdapters(served=served, held=tuple(info.adapters))

    async def load_adapter(self, replica_id: str, adapter_id: str, source: str) -> None:
        await self._client(replica_id).load_adapter(adapter_id, source, ADAPTER_TIMEOUT_S)

    async def unload_adapter(self, replica_id: str, adapter_id: str) -> None:
        await self._client(replica_id).unload_adapter(adapter_id, ADAPTER_TIMEOUT_S)

    async def load_adapter_changes(self) -> dict[str, Any] | None:
        stored = internal_kv._internal_kv_get(ADAPTER_CHANGES_KEY, namespace=NAMESPACE)
        return json.loads(stored) if stored else None

    async def save_adapter_changes(self, changes: dict[str, Any]) -> None:
        value = json.dumps(changes)
        internal_kv._internal_kv_put(ADAPTER_CHANGES_KEY, value, namespace=NAMESPACE)

    def kill(self, replica_id: str) -> None:
        actor = self._actors.pop(replica_id, None)
        if actor is not None:
            with contextlib.suppress(RayError, ValueError):
                ray.kill(actor)
        client = self._clients.pop(replica_id, None)
        if client is not None:
            closing = asyncio.create_task(client.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)


def _replica_names() -> list[str]:
    """The names of the live actors in the neuraxis namespace but the
    controller's: the replicas."""
    listed = ray.util.list_named_actors(all_namespaces=True)
    return sorted(
        a["name"]
        for a in listed
        if a.get("namespace") == NAMESPACE and a["name"] != CONTROLLER_NAME
    )


def kill_replicas() -> list[str]:
    """Kill every replica actor left in the cluster (their neurons die with
    them); what `neuraxis cluster stop` does after the controller drained
    the ones it knew. Returns their names."""
    names = _replica_names()
    for name in names:
        with contextlib.suppress(RayError, ValueError):
            ray.kill(ray.get_actor(name, namespace=NAMESPACE))
    return names


def _started(record: dict[str, Any]) -> Started:
    """The neuron's details as the replica actor recorded them."""
    return Started(record["address"], record["metrics_port"], record["pid"], record["log"])


def _running(record: dict[str, Any]) -> RunningReplica:
    started = record["started"]
    return RunningReplica(
        replica_id=record["replica_id"],
        model=record["model"],
        serial=int(record["serial"]),
        node_id=record["node_id"],
        host=record["host"],
        generation=_generation(record["labels"].get(GENERATION_LABEL)),
        created=float(record["created"]),
        started=_started(started) if started else None,
        started_at=started.get("at") if started else None,
    )


def _node_view(node: dict[str, Any]) -> NodeView:
    return NodeView(
        node_id=node["NodeID"],
        host=node["NodeManagerAddress"],
        generation=_generation(node.get("Labels", {}).get(GENERATION_LABEL)),
        gpus=int(node.get("Resources", {}).get("GPU", 0)),
        alive=bool(node["Alive"]),
    )


def _generation(label: str | None) -> Generation | None:
    try:
        return Generation(label) if label else None
    except ValueError:
        return None


def _cause(error: Exception) -> str:
    """The message of the exception an actor method raised, without Ray's
    traceback wrapping."""
    cause = getattr(error, "cause", None)
    return str(cause) if cause is not None else str(error).strip().splitlines()[-1]


class ControllerShell:
    """The controller as a Ray actor: plain data in and out of its methods.

    `spec` is the one it was created with: when Ray restarts the actor (it
    runs with max_restarts=-1) the constructor runs again with it, and the
    first call adopts the running replicas and applies it, so the
    controller comes back even before cortex re-applies its own."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        spec: dict[str, Any] | None = None,
        **former: Any,
    ) -> None:
        # Ray restarts a detached controller with the arguments it was created
        # with, and an earlier cortex passed the config's fields one by one.
        config = config or ControllerConfig(**former)
        credentials = channel_credentials(config.tls) if config.tls else None
        self._controller = Controller(RayBackend(credentials), SystemClock(), config)
        self._initial = spec

    async def _resume(self) -> None:
        if self._initial is not None:
            spec, self._initial = self._initial, None
            await self._controller.apply(DeploymentSpec.model_validate(spec))

    async def apply(self, spec: dict[str, Any]) -> None:
        self._initial = None
        await self._controller.apply(DeploymentSpec.model_validate(spec))

    async def table(
        self, known_version: int, timeout_s: float, known_epoch: str | None = None
    ) -> dict[str, Any]:
        await self._resume()
        table = await self._controller.table.wait(known_version, timeout_s, known_epoch)
        return {**table, "adopted": self._controller.adopted_replicas}

    async def status(self) -> dict[str, Any]:
        await self._resume()
        return self._controller.status().model_dump(mode="json")

    async def report(self, report: dict[str, Any]) -> dict[str, Any]:
        """A cortex report; the answer is the autoscaling view (ScalingView)."""
        return self._controller.report(CortexReport.read(report)).model_dump(mode="json")

    async def mark_node(self, name: str, mark: str | None) -> dict[str, Any]:
        """`neuraxis node cordon|drain|uncordon`: the node's id, or the error."""
        await self._resume()
        try:
            node = await self._controller.mark_node(name, NodeMark(mark) if mark else None)
        except NodeError as e:
            return {"error": str(e)}
        return {"node_id": node.node_id, "host": node.host}

    async def add_adapter(self, model: str, adapter_id: str, source: str) -> dict[str, Any]:
        """`neuraxis adapters add`: what was done, or {"error": ...} (as_data)."""
        await self._resume()
        try:
            return await self._controller.add_adapter(model, adapter_id, source)
        except NeuraxisError as e:
            return {"error": as_data(e)}

    async def remove_adapter(self, adapter_id: str) -> dict[str, Any]:
        """`neuraxis adapters remove`: what was done, or {"error": ...}."""
        await self._resume()
        try:
            return await self._controller.remove_adapter(adapter_id)
        except NeuraxisError as e:
            return {"error": as_data(e)}

    async def list_adapters(self) -> dict[str, Any]:
        """`neuraxis adapters list`."""
        await self._resume()
        return await self._controller.list_adapters()

    async def shutdown(self) -> None:
        # Adopts what runs (to drain it) without placing anything new.
        self._initial = None
        await self._controller.shutdown()


ControllerActor = ray.remote(ControllerShell)
