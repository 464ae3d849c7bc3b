"""The controller: keeps the deployment spec true on a cluster.

A new controller first adopts the replicas it finds running (adoption.py).
Then every `health_interval_s` a pass reads the nodes, checks each serving
replica, replaces the ones that died (with their actor, their node or their
neuron) or failed too many checks, drains the ones a scale-down removes,
and places missing ones, and brings each ready replica's LoRA adapters to
its model's (adapter_sync.py; `neuraxis adapters add | remove` change the
served spec: controller_adapters.py). Placements no node could ever satisfy are
reported with the reason and looked at again at the next pass, never retried
in a loop. cortex follows the endpoint table (the ready replicas) by
long-polling `table()`.

The class works over a `ClusterBackend` (backend.py) and a `Clock`
(clock.py) passed to its constructor; what it decides comes from
decisions.py, and lifecycle.py carries out the starts and stops. The Ray
actor that wraps it is in ray_backend.py: nothing here imports Ray, so the
unit tests run it with a fake backend and a hand-moved clock.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from axon.tls import TlsFiles
from cortex.cluster import decisions
from cortex.cluster.adoption import adopt
from cortex.cluster.backend import ClusterBackend
from cortex.cluster.clock import Clock
from cortex.cluster.controller_adapters import ControllerAdapters
from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.lifecycle import ReplicaLifecycle
from cortex.cluster.nodes import NodeMark, resolve
from cortex.cluster.placement import NodeView, no_room_reason, unplaceable_reason
from cortex.cluster.reports import CortexReports
from cortex.cluster.scaling import Scaling
from cortex.cluster.spec import DeploymentSpec, ModelSpec
from cortex.cluster.status import (
    ClusterStatus,
    CortexReport,
    ReplicaState,
    ScalingView,
    cluster_status,
)
from cortex.routing.timer import set_within

log = logging.getLogger("neuraxis.controller")


@dataclass(frozen=True)
class ControllerConfig:
    """What the controller runs with: cortex's [controller] settings, and
    cortex's TLS files (the controller runs on cortex's node) for the neurons."""

    health_interval_s: float = 2.0
    start_timeout_s: float = 900.0
    drain_timeout_s: float = 60.0
    tls: TlsFiles | None = None
    # cortex's plaintext setting, handed to the replicas it starts: their
    # neurons listen on their node's address, where plaintext needs saying.
    plaintext: bool = False


class Controller:
    def __init__(self, backend: ClusterBackend, clock: Clock, config: ControllerConfig) -> None:
        self._backend = backend
        self._clock = clock
        self._config = config
        # The autoscaled models' desired counts (scaling.py), never saved.
        self._scaling = Scaling()
        self._lifecycle = ReplicaLifecycle(
            backend,
            clock,
            self._scaling,
            start_timeout_s=config.start_timeout_s,
            drain_timeout_s=config.drain_timeout_s,
            plaintext=config.plaintext,
            adapters=lambda: self._spec.adapters(),
        )
        # The lifecycle's records, read here by every decision.
        self._replicas = self._lifecycle.replicas
        # The applied spec, the adapters added and removed at run time over
        # it, and the replicas' adapters kept to what they make.
        # A change reaches cortex's table at once: a run-time adapter's
        # request must wake its base, a removed one be forgotten.
        self.adapters = ControllerAdapters(
            backend, lambda: list(self._replicas.values()), self._lifecycle.publish
        )
        self._nodes: list[NodeView] = []
        self._unplaceable: dict[str, str] = {}
        # Nodes where a replica's actor just died: not preferred until then.
        self._suspect: dict[str, float] = {}
        self._rebalanced: dict[str, float] = {}
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self._adopted = False
        self._adopting = asyncio.Lock()
        # Replicas this controller adopted when it started (in its table and
        # status: cortex counts them when a new controller replaces the old).
        self.adopted_replicas = 0
        self.table = self._lifecycle.table
        self._passes = 0
        self._reports = CortexReports()
        # Cordoned and draining nodes (nodes.py), by node id.
        self._marks: dict[str, NodeMark] = {}
        # Set to run the next pass at once (a request woke a model at zero).
        self._poked = asyncio.Event()

    # -- what the actor exposes ----------------------------------------------

    async def apply(self, spec: DeploymentSpec, start_loop: bool = True) -> None:
        """Take a (new) deployment spec and reconcile to it now; the first
        one adopts the replicas already running, then starts the periodic
        passes (unless `start_loop` is false, for tests that drive `tick()`
        themselves)."""
        await self.adopt()
        spec = self.adapters.apply(spec)
        self._scaling.follow(spec, lambda model_id: len(self._active(model_id)))
        log.info(
            "deployment spec: %s",
            ", ".join(f"{m.id}×{self.desired(m)}" for m in spec.models) or "no models",
        )
        if self._loop is None and start_loop:
            self._loop = asyncio.create_task(self._run())
        else:
            await self.tick()

    def report(self, report: CortexReport) -> ScalingView:
        """A cortex instance's periodic report (its requests in flight per
        replica, queued per model); kept for REPORT_TTL_S, so a cortex that
        stopped drops out. A request queued for a model at zero replicas
        wakes it now rather than at the next pass. The answer is the
        autoscaling view (metrics and wake timeouts on cortex's side)."""
        self._reports.add(report, self._clock.monotonic())
        if self._scaling.wakes(report):
            self._poked.set()
        return self._scaling.view()

    @property
    def _spec(self) -> DeploymentSpec:
        """The spec served: the applied one with the run-time adapter changes."""
        return self.adapters.serving

    async def add_adapter(self, model_id: str, adapter_id: str, source: str) -> dict[str, Any]:
        """`neuraxis adapters add` (controller_adapters.py); a NeuraxisError
        says why it was refused."""
        await self.adopt()
        return await self.adapters.add(model_id, adapter_id, source)

    async def remove_adapter(self, adapter_id: str) -> dict[str, Any]:
        """`neuraxis adapters remove`; ModelNotFoundError for an unknown id."""
        await self.adopt()
        return await self.adapters.remove(adapter_id)

    async def list_adapters(self) -> dict[str, Any]:
        """`neuraxis adapters list`: each adapter and the replicas holding it."""
        await self.adopt()
        return await self.adapters.listing()

    def desired(self, model: ModelSpec) -> int:
        """The replica count the controller keeps `model` at now."""
        return self._scaling.desired(model)

    async def mark_node(self, name: str, mark: NodeMark | None) -> NodeView:
        """Cordon (`CORDONED`), drain (`DRAINING`) or uncordon (None) the node
        `name` means (nodes.resolve); the change is saved in the cluster and
        a pass runs at once. NodeError when no node or several match."""
        await self.adopt()
        self._nodes = await self._backend.nodes()
        node = resolve(self._nodes, name)
        if mark is None:
            self._marks.pop(node.node_id, None)
        else:
            self._marks[node.node_id] = mark
        await self._backend.save_marks(self._marks)
        log.info("node %s (%s): %s", node.node_id, node.host, mark.value if mark else "uncordoned")
        await self.tick()
        return node

    def _schedulable(self) -> list[NodeView]:
        """The nodes new replicas may go to: not cordoned, not draining."""
        return [n for n in self._nodes if n.node_id not in self._marks]

    def status(self) -> ClusterStatus:
        return cluster_status(
            self._spec,
            self._replicas.values(),
            self._nodes,
            self._reports.fresh(self._clock.monotonic()),
            marks=self._marks,
            unplaceable=self._unplaceable,
            desired={m.id: self.desired(m) for m in self._spec.models},
            scaling=self._scaling.states,
            start_errors=self._lifecycle.start_errors(),
            failovers=self._lifecycle.failovers.recent(),
            version=self.table.version,
            epoch=self.table.epoch,
            passes=self._passes,
            adopted=self.adopted_replicas,
            now=self._clock.time(),
            monotonic=self._clock.monotonic(),
        )

    async def shutdown(self) -> None:
        """Drain and stop every replica (the embedded default's exit),
        including those running from before this controller."""
        await self.adopt()
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()
        await self.adapters.sync.stop()
        for replica in list(self._replicas.values()):
            if replica.state is not ReplicaState.DRAINING:
                self._lifecycle.drain(replica)
        await self._lifecycle.publish()
        await self._lifecycle.wait()

    async def adopt(self) -> None:
        """Once per controller: take over the replicas found running. The
        serving ones keep their ids, addresses and neurons; the rest are
        killed, and those that had served count as lost (their replacement
        is recorded as a failover)."""
        async with self._adopting:
            if self._adopted:
                return
            self._marks = await self._backend.load_marks()
            await self.adapters.load()
            adoption = await adopt(self._backend, self._clock.monotonic())
            self._lifecycle.adopted(adoption)
            self.adopted_replicas = len(self._replicas)
            self._adopted = True
        await self._lifecycle.publish()

    # -- one pass --------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._poked.clear()
            try:
                await self.tick()
            except Exception:
                log.exception("controller pass failed")
            # The next pass comes after the interval, or at once when a
            # request wakes a model at zero replicas (`report`).
            await set_within(self._poked, self._clock.sleep(self._config.health_interval_s))

    async def tick(self) -> None:
        """One pass: nodes, checks, reconciling every model, the table."""
        if self._stopping:
            return
        self._nodes = await self._backend.nodes()
        await asyncio.gather(*(self._check(r) for r in list(self._replicas.values())))
        self.adapters.sync.step(self._replicas.values())
        now = self._clock.monotonic()
        self._scaling.step(self._spec, self._replicas.values(), self._reports.fresh(now), now)
        for model in self._reconcile_order():
            self._reconcile(model)
        for replica in list(self._replicas.values()):
            if (
                self._spec.model(replica.model) is None
                and replica.state is not ReplicaState.DRAINING
            ):
                self._lifecycle.drain(replica)  # the model left the spec
        await self._lifecycle.publish()
        self._passes += 1

    async def _check(self, replica: ReplicaRecord) -> None:
        if replica.state not in (ReplicaState.READY, ReplicaState.UNHEALTHY):
            return  # starting and draining replicas are watched by their task
        checked = replica.state
        health = await self._backend.check(replica.id)
        if replica.id not in self._replicas or replica.state is not checked:
            # Lost, or drained (a scale-down, a new spec) while the check ran:
            # this verdict is older than that decision. Applied, it put a
            # draining replica back to READY, the same pass drained it again,
            # which cancelled the first drain and killed the replica under its
            # in-flight streams.
            return
        verdict = decisions.health_verdict(replica.state, replica.failures, health)
        if verdict.lost is not None:
            self._lost(replica, verdict.lost, verdict.node_suspect)
            return
        if verdict.state is not replica.state:
            if verdict.state is ReplicaState.UNHEALTHY:
                log.warning("replica %s at %s is unhealthy", replica.id, replica.address)
            else:
                log.info("replica %s at %s is healthy again", replica.id, replica.address)
        replica.state = verdict.state
        replica.failures = verdict.failures
        replica.record_load(health, self._clock.monotonic())

    def _lost(self, replica: ReplicaRecord, reason: str, node_suspect: bool) -> None:
        """A replica died: forget it (the next reconcile places a replacement)
        and remember when, to measure the time to its replacement."""
        log.warning(
            "replica %s of %s at %s lost: %s", replica.id, replica.model, replica.address, reason
        )
        self._lifecycle.forget(replica)
        if replica.node_id and node_suspect:
            self._suspect[replica.node_id] = self._clock.monotonic() + decisions.SUSPECT_S
        self._lifecycle.failovers.lost(
            replica.model, replica.id, reason, replica.address, self._clock.time()
        )

    def _active(self, model_id: str) -> list[ReplicaRecord]:
        return [
            r
            for r in self._replicas.values()
            if r.model == model_id and r.state is not ReplicaState.DRAINING
        ]

    def _reconcile_order(self) -> list[ModelSpec]:
        """The models in the order they get free GPUs: those below their
        min_replicas first, then the spec's order (a model never takes
        another's running replicas)."""

        def below_min(model: ModelSpec) -> bool:
            floor = model.autoscale.min_replicas if model.autoscale else model.replicas
            return len(self._active(model.id)) < floor

        return sorted(self._spec.models, key=lambda m: not below_min(m))

    def _reconcile(self, model: ModelSpec) -> None:
        active = self._active(model.id)
        desired = self.desired(model)
        leaving = [r for r in active if self._marks.get(r.node_id or "") is NodeMark.DRAINING]
        if leaving:
            self._move_off(model, active, leaving)
            return
        if len(active) > desired:
            in_flight = self._in_flight()
            for replica in decisions.scale_down_victims(active, desired, in_flight):
                self._lifecycle.drain(replica)
            return
        if len(active) == desired:
            self._unplaceable.pop(model.id, None)
            self._rebalance(model, active)
            return
        self._place_missing(model, desired - len(active))

    def _in_flight(self) -> dict[str, int]:
        """Requests in flight per replica id: the cortex instances' (fresh
        reports), else its engine's last count."""
        fresh = self._reports.fresh(self._clock.monotonic())
        counts: dict[str, int] = {}
        for replica in self._replicas.values():
            if fresh and replica.address:
                counts[replica.id] = sum(r.in_flight.get(replica.address, 0) for r, _ in fresh)
            elif replica.engine_running is not None:
                counts[replica.id] = replica.engine_running + (replica.engine_waiting or 0)
        return counts

    def _place_missing(self, model: ModelSpec, count: int) -> int:
        """Place `count` replicas of `model` on schedulable nodes; how many
        were placed (none when no such node can hold one, or while the
        model's starts back off)."""
        reason = unplaceable_reason(model, self._schedulable())
        if reason is not None:
            if unplaceable_reason(model, self._nodes) is None:
                reason = "every node that could hold it is cordoned or draining"
            if self._unplaceable.get(model.id) != reason:
                log.error("cannot place %s: %s", model.id, reason)
            self._unplaceable[model.id] = reason
            return 0
        self._unplaceable.pop(model.id, None)
        if self._lifecycle.backing_off(model.id):
            return 0
        placed = 0
        for _ in range(count):
            if model.autoscale is not None and self._no_room(model):
                break
            self._lifecycle.place(model, *self._target(model))
            placed += 1
        return placed

    def _no_room(self, model: ModelSpec) -> bool:
        """An autoscaled model's scale-up finds no node with room: say why in
        its status instead of leaving a replica pending on the cluster."""
        used = decisions.usage(list(self._replicas.values()), self._spec)
        reason = no_room_reason(model, self._schedulable(), used.gpus)
        if reason is None:
            return False
        if self._unplaceable.get(model.id) != reason:
            log.warning("cannot scale %s up: %s", model.id, reason)
        self._unplaceable[model.id] = reason
        return True

    def _move_off(
        self, model: ModelSpec, active: list[ReplicaRecord], leaving: list[ReplicaRecord]
    ) -> None:
        """Replicas on draining nodes: replacements elsewhere first; each
        leaving replica drains once the ready replicas elsewhere keep the
        model's ready count (one not serving yet drains at once)."""
        staying = [r for r in active if r not in leaving]
        desired = self.desired(model)
        if len(staying) < desired:
            self._place_missing(model, desired - len(staying))
        for replica in decisions.moved_off(staying, leaving, desired):
            log.info("moving %s off draining node %s", replica.id, replica.node_id)
            self._lifecycle.drain(replica)

    def _rebalance(self, model: ModelSpec, active: list[ReplicaRecord]) -> None:
        now = self._clock.monotonic()
        has_free = self._next_node(model) is not None
        mover = decisions.rebalance_mover(
            active, has_free, self._rebalanced.get(model.id, float("-inf")), now
        )
        if mover is None:
            return
        self._rebalanced[model.id] = now
        log.info(
            "moving replica %s of %s off node %s, which holds several of its replicas",
            mover.id,
            model.id,
            mover.node_id,
        )
        self._lifecycle.drain(mover)

    def _next_node(self, model: ModelSpec) -> str | None:
        avoid = decisions.avoided_nodes(self._suspect, self._clock.monotonic())
        replicas = list(self._replicas.values())
        return decisions.next_node(model, self._schedulable(), replicas, self._spec, avoid)

    def _target(self, model: ModelSpec) -> tuple[str | None, bool]:
        """Where the next replica goes and whether only there: with nodes
        cordoned, a node picked here (one without a replica of the model if
        any, else the least loaded schedulable one), pinned."""
        preferred = self._next_node(model)
        if not self._marks:
            return preferred, False
        if preferred is None:
            replicas = list(self._replicas.values())
            preferred = decisions.least_loaded_node(model, self._schedulable(), replicas)
        return preferred, preferred is not None
