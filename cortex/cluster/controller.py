"""The controller: a named, detached Ray actor that keeps the deployment spec
true.

Every `health_interval_s` it reads the nodes, checks each replica (the
actor answers and its neuron process runs; the neuron's gRPC health says
SERVING; its load for the status), replaces replicas that died (with their
actor or with their node), drains the ones a scale-down removes, and places
missing ones as Ray actors with a GPU count and a generation label selector.
Placements that no node could ever satisfy are reported with the reason and
re-checked at the next interval, never retried in a loop.

cortex follows the endpoint table (the ready replicas) by long-polling
`table()`; nothing on the request path calls Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cortex.cluster.placement import (
    NodeView,
    eligibility,
    label_selector,
    preferred_node,
    unplaceable_reason,
)
from cortex.cluster.replica import ReplicaActor
from cortex.cluster.spec import DeploymentSpec, ModelSpec
from cortex.routing.client import NeuronClient
from neuraxis.core.errors import NeuraxisError
from neuraxis.core.generations import GENERATION_LABEL, PROFILES, Generation

log = logging.getLogger("neuraxis.controller")

CONTROLLER_NAME = "neuraxis-controller"
NAMESPACE = "neuraxis"
# Consecutive failed health checks before a replica leaves the table, and
# before it is replaced.
UNHEALTHY_AFTER = 3
REPLACE_AFTER = 10
# A replica not placed after this long is reported as waiting for resources.
PENDING_REPORT_S = 10.0
# Start failures of a model back off up to this long between attempts.
MAX_BACKOFF_S = 60.0
# How long a node where a replica's actor died (perhaps with the node, which
# Ray reports dead only seconds later) is not preferred for new ones.
SUSPECT_S = 15.0
# At most one replica of a model moved to another node this often.
REBALANCE_EVERY_S = 10.0
# Time between taking a draining replica out of the table and stopping it,
# so that cortex stops picking it first.
DRAIN_DELAY_S = 1.0


class ReplicaState(Enum):
    PENDING = "pending"  # waiting for Ray to place the actor
    STARTING = "starting"  # placed; the neuron is loading
    READY = "ready"
    UNHEALTHY = "unhealthy"  # out of the table; replaced if it stays so
    DRAINING = "draining"


@dataclass
class Replica:
    id: str
    model: str
    actor: Any
    created: float
    state: ReplicaState = ReplicaState.PENDING
    node_id: str | None = None
    host: str | None = None
    generation: str | None = None
    address: str | None = None
    metrics_port: int | None = None
    pid: int | None = None  # the neuron process, on its node
    log: str | None = None
    failures: int = 0
    in_flight: int | None = None
    ready_at: float | None = None
    replaces: dict[str, Any] | None = None  # the failure this replica replaces
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    client: NeuronClient | None = field(default=None, repr=False)


@dataclass
class Backoff:
    failures: int = 0
    not_before: float = 0.0
    last_error: str = ""


class Controller:
    def __init__(
        self,
        health_interval_s: float = 2.0,
        start_timeout_s: float = 900.0,
        drain_timeout_s: float = 60.0,
    ) -> None:
        self._interval = health_interval_s
        self._start_timeout = start_timeout_s
        self._drain_timeout = drain_timeout_s
        self._spec = DeploymentSpec()
        self._replicas: dict[str, Replica] = {}
        self._nodes: list[NodeView] = []
        self._unplaceable: dict[str, str] = {}
        self._backoff: dict[str, Backoff] = {}
        # Nodes where a replica just died: no preferred target for a while.
        self._suspect: dict[str, float] = {}
        self._rebalanced: dict[str, float] = {}
        self._failovers: list[dict[str, Any]] = []
        self._pending_failures: dict[str, list[dict[str, Any]]] = {}
        self._counter = itertools.count(1)
        self._version = 0
        self._published: list[dict[str, Any]] = []
        self._changed: asyncio.Condition | None = None
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    # -- the actor's methods -------------------------------------------------

    async def apply(self, spec: dict[str, Any]) -> None:
        """Take a (new) deployment spec; the next pass reconciles to it."""
        self._spec = DeploymentSpec.model_validate(spec)
        log.info(
            "deployment spec: %s",
            ", ".join(f"{m.id}×{m.replicas}" for m in self._spec.models) or "no models",
        )
        if self._loop is None:
            self._changed = asyncio.Condition()
            self._loop = asyncio.create_task(self._run())
        else:
            await self._tick()

    async def table(self, known_version: int, timeout_s: float) -> dict[str, Any]:
        """The endpoint table, once its version is newer than `known_version`
        or after `timeout_s` (a long poll)."""
        assert self._changed is not None, "apply() a spec first"
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self._version > known_version), timeout_s
                )
            return {"version": self._version, "replicas": list(self._published)}

    async def status(self) -> dict[str, Any]:
        now = time.time()
        models = []
        for model in self._spec.models:
            replicas = [r for r in self._replicas.values() if r.model == model.id]
            backoff = self._backoff.get(model.id)
            models.append(
                {
                    "id": model.id,
                    "desired": model.replicas,
                    "generations": [g.value for g in eligibility(model).generations],
                    "gpus_per_replica": model.gpus_per_replica(),
                    "unplaceable": self._unplaceable.get(model.id),
                    "last_start_error": backoff.last_error if backoff else None,
                    "replicas": [self._describe(r, now) for r in replicas],
                }
            )
        return {
            "nodes": [
                {
                    "node_id": n.node_id,
                    "host": n.host,
                    "generation": n.generation.value if n.generation else None,
                    "gpus": n.gpus,
                    "alive": n.alive,
                }
                for n in self._nodes
            ],
            "models": models,
            "failovers": list(self._failovers),
            "version": self._version,
        }

    async def shutdown(self) -> None:
        """Drain and stop every replica (the embedded default's exit)."""
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()
        for replica in self._replicas.values():
            if replica.state is not ReplicaState.DRAINING:
                self._drain(replica)
        await self._publish()
        tasks = [r.task for r in self._replicas.values() if r.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- reconciling ---------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._tick()
            except Exception:
                log.exception("controller pass failed")
            await asyncio.sleep(self._interval)

    async def _tick(self) -> None:
        if self._stopping:
            return
        self._nodes = _read_nodes()
        await asyncio.gather(*(self._check(r) for r in list(self._replicas.values())))
        for model in self._spec.models:
            self._reconcile(model)
        for replica in list(self._replicas.values()):
            if (
                self._spec.model(replica.model) is None
                and replica.state is not ReplicaState.DRAINING
            ):
                self._drain(replica)  # the model left the spec
        await self._publish()

    async def _check(self, replica: Replica) -> None:
        if replica.state not in (ReplicaState.READY, ReplicaState.UNHEALTHY):
            return  # starting and draining replicas are watched by their task
        assert replica.client is not None
        try:
            process = await asyncio.wait_for(replica.actor.check.remote(), timeout=10)
        except (RayError, TimeoutError) as e:
            self._lost(replica, f"its actor is gone ({type(e).__name__})", node_may_be_gone=True)
            return
        if not process["running"]:
            self._lost(replica, f"its neuron exited with code {process['exit_code']}")
            return
        serving = await replica.client.serving(timeout=2.0)
        if serving:
            with contextlib.suppress(NeuraxisError):
                load = await replica.client.load(timeout=2.0)
                replica.in_flight = load.running + load.waiting
            if replica.state is ReplicaState.UNHEALTHY:
                log.info("replica %s at %s is healthy again", replica.id, replica.address)
            replica.failures = 0
            replica.state = ReplicaState.READY
            return
        replica.failures += 1
        if replica.failures >= REPLACE_AFTER:
            self._lost(replica, f"not SERVING for {replica.failures} checks")
        elif replica.failures >= UNHEALTHY_AFTER and replica.state is ReplicaState.READY:
            log.warning("replica %s at %s is unhealthy", replica.id, replica.address)
            replica.state = ReplicaState.UNHEALTHY

    def _lost(self, replica: Replica, reason: str, node_may_be_gone: bool = False) -> None:
        """A replica died: forget it (the next reconcile places a replacement)
        and remember when, to measure the time to its replacement."""
        if replica.id not in self._replicas:
            return  # already handled by a concurrent pass
        log.warning(
            "replica %s of %s at %s lost: %s", replica.id, replica.model, replica.address, reason
        )
        self._forget(replica)
        if replica.node_id and node_may_be_gone:
            self._suspect[replica.node_id] = time.monotonic() + SUSPECT_S
        self._pending_failures.setdefault(replica.model, []).append(
            {
                "model": replica.model,
                "replica": replica.id,
                "reason": reason,
                "failed_at": time.time(),
                "address": replica.address,
            }
        )

    def _forget(self, replica: Replica) -> None:
        self._replicas.pop(replica.id, None)
        with contextlib.suppress(Exception):
            ray.kill(replica.actor)
        if replica.client is not None:
            closing = asyncio.create_task(replica.client.close())
            self._background.add(closing)
            closing.add_done_callback(self._background.discard)

    def _reconcile(self, model: ModelSpec) -> None:
        active = [
            r
            for r in self._replicas.values()
            if r.model == model.id and r.state is not ReplicaState.DRAINING
        ]
        surplus = len(active) - model.replicas
        if surplus > 0:
            order = [
                ReplicaState.PENDING,
                ReplicaState.STARTING,
                ReplicaState.UNHEALTHY,
                ReplicaState.READY,
            ]
            victims = sorted(active, key=lambda r: (order.index(r.state), -r.created))
            for replica in victims[:surplus]:
                self._drain(replica)
            return
        if surplus == 0:
            self._unplaceable.pop(model.id, None)
            self._rebalance(model, active)
            return
        reason = unplaceable_reason(model, self._nodes)
        if reason is not None:
            if self._unplaceable.get(model.id) != reason:
                log.error("cannot place %s: %s", model.id, reason)
            self._unplaceable[model.id] = reason
            return
        self._unplaceable.pop(model.id, None)
        backoff = self._backoff.get(model.id)
        if backoff and time.monotonic() < backoff.not_before:
            return
        for _ in range(-surplus):
            self._place(model)

    def _rebalance(self, model: ModelSpec, active: list[Replica]) -> None:
        """When a node holds several replicas of the model (a replacement had
        nowhere else to go) and an eligible node with room holds none, move one:
        drain it; the next pass places its replacement there."""
        now = time.monotonic()
        if len(active) < 2 or any(r.state is not ReplicaState.READY for r in active):
            return
        if now - self._rebalanced.get(model.id, 0.0) < REBALANCE_EVERY_S:
            return
        per_node = Counter(r.node_id for r in active)
        crowded = [r for r in active if per_node[r.node_id] > 1]
        if not crowded or self._preferred(model) is None:
            return
        self._rebalanced[model.id] = now
        mover = max(crowded, key=lambda r: r.created)
        log.info(
            "moving replica %s of %s off node %s, which holds %d of its replicas",
            mover.id,
            model.id,
            mover.node_id,
            per_node[mover.node_id],
        )
        self._drain(mover)

    def _preferred(self, model: ModelSpec) -> str | None:
        by_node: dict[str, list[str]] = {}
        used: dict[str, int] = {}
        for other in self._replicas.values():
            if other.node_id is None:
                continue
            spec = self._spec.model(other.model)
            used[other.node_id] = used.get(other.node_id, 0) + (
                spec.gpus_per_replica() if spec else 0
            )
            if other.state is not ReplicaState.DRAINING:
                by_node.setdefault(other.node_id, []).append(other.model)
        now = time.monotonic()
        avoid = frozenset(n for n, until in self._suspect.items() if until > now)
        return preferred_node(model, self._nodes, by_node, avoid, used)

    def _place(self, model: ModelSpec) -> None:
        generations = eligibility(model).generations
        replica_id = f"{model.id}-{next(self._counter)}"
        node = self._preferred(model)
        # Soft: Ray still places it on another eligible node when this one is
        # full; SPREAD when every eligible node already holds a replica.
        strategy: Any = (
            NodeAffinitySchedulingStrategy(node_id=node, soft=True) if node else "SPREAD"
        )
        actor = ReplicaActor.options(
            # Named, so that an operator (or a test) can find a replica's actor.
            name=replica_id,
            namespace=NAMESPACE,
            num_cpus=0,
            num_gpus=model.gpus_per_replica(),
            label_selector=label_selector(generations),
            scheduling_strategy=strategy,
            max_restarts=0,
            max_concurrency=16,
        ).remote(replica_id)
        # Where it is meant to go, until the actor says where it went; the
        # next placement of this pass then prefers another node.
        replica = Replica(replica_id, model.id, actor, created=time.time(), node_id=node)
        failures = self._pending_failures.get(model.id)
        if failures:
            replica.replaces = failures.pop(0)
        self._replicas[replica_id] = replica
        replica.task = asyncio.create_task(self._start(replica, model))
        log.info(
            "placing %s (%s, %d GPUs)",
            replica_id,
            "/".join(g.value for g in generations),
            model.gpus_per_replica(),
        )

    async def _start(self, replica: Replica, model: ModelSpec) -> None:
        try:
            where = await replica.actor.where.remote()
            replica.node_id = where["node_id"]
            replica.host = where["host"]
            replica.generation = where["labels"].get(GENERATION_LABEL)
            replica.state = ReplicaState.STARTING
            args = neuron_args(model, Generation(replica.generation))
            started = await replica.actor.start.remote(args, self._start_timeout)
        except (RayError, ValueError) as e:
            if replica.id in self._replicas:  # not drained or lost meanwhile
                self._start_failed(replica, model, _cause(e))
            return
        replica.address = started["address"]
        replica.metrics_port = started["metrics_port"]
        replica.pid = started["pid"]
        replica.log = started["log"]
        replica.client = NeuronClient(replica.address)
        replica.state = ReplicaState.READY
        replica.ready_at = time.time()
        self._backoff.pop(model.id, None)
        log.info(
            "replica %s of %s ready at %s on %s (%s)",
            replica.id,
            model.id,
            replica.address,
            replica.host,
            replica.generation,
        )
        if replica.replaces is not None:
            failover = dict(replica.replaces)
            failover.update(
                replacement=replica.id,
                replacement_address=replica.address,
                ready_at=replica.ready_at,
                seconds_to_ready=round(replica.ready_at - failover["failed_at"], 3),
            )
            self._failovers = [*self._failovers[-19:], failover]
        await self._publish()

    def _start_failed(self, replica: Replica, model: ModelSpec, reason: str) -> None:
        backoff = self._backoff.setdefault(model.id, Backoff())
        backoff.failures += 1
        delay = min(2.0**backoff.failures, MAX_BACKOFF_S)
        backoff.not_before = time.monotonic() + delay
        backoff.last_error = reason
        log.error(
            "replica %s of %s failed to start (next attempt in %.0f s): %s",
            replica.id,
            model.id,
            delay,
            reason,
        )
        if replica.replaces is not None:
            self._pending_failures.setdefault(model.id, []).insert(0, replica.replaces)
        self._forget(replica)

    def _drain(self, replica: Replica) -> None:
        previous = replica.state
        replica.state = ReplicaState.DRAINING
        if replica.task is not None and not replica.task.done():
            replica.task.cancel()  # still starting: nothing to drain
        replica.task = asyncio.create_task(self._stop(replica, previous))
        log.info("draining %s at %s", replica.id, replica.address)

    async def _stop(self, replica: Replica, previous: ReplicaState) -> None:
        try:
            if previous in (ReplicaState.READY, ReplicaState.UNHEALTHY):
                await self._publish()
                await asyncio.sleep(DRAIN_DELAY_S)
                with contextlib.suppress(RayError):
                    await replica.actor.drain.remote(self._drain_timeout)
        finally:
            self._forget(replica)
            log.info("replica %s stopped", replica.id)

    async def _publish(self) -> None:
        table = [
            {
                "replica": r.id,
                "model": r.model,
                "address": r.address,
                "generation": r.generation,
                "metrics_port": r.metrics_port,
            }
            for r in sorted(self._replicas.values(), key=lambda r: r.id)
            if r.state is ReplicaState.READY
        ]
        if table == self._published or self._changed is None:
            return
        async with self._changed:
            self._published = table
            self._version += 1
            self._changed.notify_all()

    def _describe(self, replica: Replica, now: float) -> dict[str, Any]:
        state = replica.state.value
        waiting = None
        if replica.state is ReplicaState.PENDING and now - replica.created > PENDING_REPORT_S:
            model = self._spec.model(replica.model)
            need = model.gpus_per_replica() if model else 0
            waiting = f"waiting for a node with {need} free GPUs" if need else "waiting for Ray"
        return {
            "id": replica.id,
            "state": state,
            "waiting": waiting,
            "address": replica.address,
            "host": replica.host,
            "node_id": replica.node_id,
            "generation": replica.generation,
            "in_flight": replica.in_flight,
            "pid": replica.pid,
            "log": replica.log,
        }


def neuron_args(model: ModelSpec, generation: Generation) -> list[str]:
    """`neuraxis neuron serve` arguments for a replica of `model` on a node of
    `generation` (the replica adds its host and ports)."""
    engine = model.engine
    args = ["--engine", engine.kind, "--served-id", model.id]
    if engine.kind == "sim":
        args += ["--sim-ttft-s", str(engine.sim_ttft_s), "--sim-itl-s", str(engine.sim_itl_s)]
        args += ["--sim-generation", generation.value]
    else:
        args += ["--generation", generation.value]
        args += ["--model", model.source, "--kv-cache-gib", str(engine.kv_cache_gib)]
        args += ["--dtype", engine.dtype or PROFILES[generation].dtype]
        args += ["--tensor-parallel-size", str(model.tensor_parallel_size)]
    if model.task:
        args += ["--task", model.task]
    if model.max_context:
        args += ["--max-model-len", str(model.max_context)]
    for flag, value in (
        ("--quantization", engine.quantization),
        ("--kv-cache-dtype", engine.kv_cache_dtype),
        ("--tool-parser", engine.tool_parser),
        ("--reasoning-parser", engine.reasoning_parser),
    ):
        if value:
            args += [flag, value]
    return args


def _read_nodes() -> list[NodeView]:
    nodes = []
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        label = node.get("Labels", {}).get(GENERATION_LABEL)
        try:
            generation = Generation(label) if label else None
        except ValueError:
            generation = None
        nodes.append(
            NodeView(
                node_id=node["NodeID"],
                host=node["NodeManagerAddress"],
                generation=generation,
                gpus=int(node.get("Resources", {}).get("GPU", 0)),
                alive=bool(node["Alive"]),
            )
        )
    return nodes


def _cause(error: Exception) -> str:
    """The message of the exception an actor method raised, without Ray's
    traceback wrapping."""
    cause = getattr(error, "cause", None)
    return str(cause) if cause is not None else str(error).strip().splitlines()[-1]


ControllerActor = ray.remote(Controller)
