"""cortex's side of cluster mode: joining the Ray cluster as a driver,
starting or finding the controller, following its endpoint table and
reporting back what this cortex has in flight (for `neuraxis status`).

The table is long-polled from the controller in a background task and handed
to the neuron pool; requests never wait on Ray. When the controller is lost
the pool keeps routing on the last table while the follower re-creates the
controller (or waits for Ray to restart it) with a back-off; the new one
adopts the running replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import AuthenticationError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from axon.errors import UnavailableError, from_data
from cortex.cluster.adapter_cards import adapter_cards
from cortex.cluster.controller import ControllerConfig
from cortex.cluster.plane import ControlPlane, watch_head
from cortex.cluster.ray_backend import (
    CONTROLLER_NAME,
    NAMESPACE,
    ControllerActor,
    kill_replicas,
)
from cortex.cluster.scaling_follower import ScalingFollower
from cortex.cluster.spec import DeploymentSpec, spec_to_dict
from cortex.cluster.status import ClusterStatus, CortexReport, ScalingView
from cortex.cluster.table import TableView
from cortex.routing.pool import NeuronPool
from cortex.schemas.adapters import AdapterCard

log = logging.getLogger("neuraxis.cortex")

# How long one long poll of the table may wait for a change.
POLL_S = 20.0
# How long applying the spec to a (new or restarting) controller may take.
APPLY_S = 60.0
# Retries to reach a lost controller back off up to this long.
MAX_RETRY_S = 10.0
# How often cortex tells the controller what it has in flight.
REPORT_S = 2.0
# How long an adapter's add or remove may take: the controller's checks and
# each replica's load or unload (an unload waits for the adapter's requests).
ADAPTER_CHANGE_S = 300.0


class ClusterError(Exception):
    """The Ray cluster or the controller cannot be reached."""


# The address this process joined (rejoin() joins it again).
_joined: str | None = None


def connect(address: str) -> None:
    """Join the Ray cluster at `address` as a driver (once per process)."""
    global _joined
    _joined = address
    if ray.is_initialized():
        return
    try:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError, AuthenticationError) as e:
        raise ClusterError(f"cannot join the Ray cluster at {address}: {e}") from None


@dataclass
class ControllerLink:
    """cortex's handle on the controller, with what it takes to re-create
    it (the spec and the controller's settings) when it is gone."""

    spec: DeploymentSpec
    config: ControllerConfig
    actor: Any = None

    def reconnect(self) -> None:
        """Find the controller, or start it if it is gone, and give it the
        spec (a new controller adopts the running replicas first)."""
        if cut_off():
            # No call on the old session's handle from here on (the
            # reports find no actor, and say so at debug level).
            self.actor = None
            rejoin()
        self.actor = _controller_actor(self.spec, self.config)
        ray.get(self.actor.apply.remote(spec_to_dict(self.spec)), timeout=APPLY_S)


def ensure_controller(spec: DeploymentSpec, config: ControllerConfig) -> ControllerLink:
    """Start the controller, or find the one already running, and give it
    the spec. It runs on the head node (which leaves only with the cluster),
    detached from this process, so that a cortex restart leaves the replicas
    serving; Ray restarts it when it dies."""
    link = ControllerLink(spec, config)
    link.reconnect()
    return link


def cut_off() -> bool:
    """True when this driver's Ray node is gone. A driver talks to Ray
    through the raylet of its node, the head's on cortex's host: once the
    head has restarted (with GCS fault tolerance) that raylet is dead and
    every Ray call fails for good (the GCS even marks this driver's job
    finished)."""
    if _joined is None or not ray.is_initialized():
        return False
    ours = ray.get_runtime_context().get_node_id()
    return ours not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def rejoin() -> None:
    """Leave Ray and join the cluster again (through the head's new node)."""
    assert _joined is not None
    log.warning("this driver's Ray node is gone (the head restarted); joining %s again", _joined)
    ray.shutdown()
    connect(_joined)


def _controller_actor(spec: DeploymentSpec, config: ControllerConfig) -> Any:
    here = _head_node_id() or ray.get_runtime_context().get_node_id()
    return ControllerActor.options(
        name=CONTROLLER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=1000,
        # Ray restarts a controller that dies; the replicas, detached, stay.
        max_restarts=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    ).remote(config=config, spec=spec_to_dict(spec))


def _head_node_id() -> str | None:
    for node in ray.nodes():
        if node["Alive"] and "node:__internal_head__" in node.get("Resources", {}):
            return str(node["NodeID"])
    return None


def find_controller() -> Any:
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        raise ClusterError(
            f"no controller ('{CONTROLLER_NAME}') is running in this Ray cluster; "
            "start cortex in cluster mode first"
        ) from None


def status(timeout_s: float = 30.0) -> ClusterStatus:
    result: dict[str, Any] = ray.get(find_controller().status.remote(), timeout=timeout_s)
    try:
        return ClusterStatus.read(result)
    except (TypeError, KeyError, ValueError) as e:
        # A controller left running by another version of neuraxis.
        raise ClusterError(f"the controller's status is not in this version's form: {e}") from None


def mark_node(name: str, mark: str | None, timeout_s: float = 60.0) -> tuple[str, str]:
    """Cordon ("cordoned"), drain ("draining") or uncordon (None) a node;
    its id and host. ClusterError when the controller refuses (no such
    node, several)."""
    result: dict[str, str] = ray.get(
        find_controller().mark_node.remote(name, mark), timeout=timeout_s
    )
    if "error" in result:
        raise ClusterError(result["error"])
    return result["node_id"], result["host"]


def add_adapter(
    model: str, adapter_id: str, source: str, timeout_s: float = ADAPTER_CHANGE_S
) -> dict[str, Any]:
    """`neuraxis adapters add`: what the controller did (controller_adapters.py);
    its refusal raised as the NeuraxisError it was."""
    return _adapter_call("add_adapter", (model, adapter_id, source), timeout_s)


def remove_adapter(adapter_id: str, timeout_s: float = ADAPTER_CHANGE_S) -> dict[str, Any]:
    """`neuraxis adapters remove`: what the controller did, or its refusal."""
    return _adapter_call("remove_adapter", (adapter_id,), timeout_s)


def list_adapters(timeout_s: float = 60.0) -> dict[str, Any]:
    """`neuraxis adapters list`: each adapter and the replicas holding it."""
    return _adapter_call("list_adapters", (), timeout_s)


def _adapter_call(method: str, args: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = ray.get(
            getattr(find_controller(), method).remote(*args), timeout=timeout_s
        )
    except RayError as e:
        raise ClusterError(f"the controller did not answer: {type(e).__name__}") from None
    if "error" in answer:
        raise from_data(answer["error"])
    return answer


class ControllerAdapterControl:
    """The admin listener's /v1/adapters in cluster mode (cortex/api/adapters.py):
    a change (POST, DELETE) goes to the controller, as `neuraxis adapters
    add | remove` does, so that both agree and an added adapter is served by
    the replicas the controller starts later too; GET lists what the
    controller serves (adapter_cards.py), as `neuraxis adapters list`. The
    link is set once cortex has joined the cluster (app.py); until then, and
    while the controller does not answer, a change (or the list) is answered
    503. A change's answer: the addresses of the replicas told now."""

    def __init__(self) -> None:
        self.link: ControllerLink | None = None

    async def add(self, model: str, adapter_id: str, source: str) -> list[str]:
        return list((await self._call("add_adapter", model, adapter_id, source))["addresses"])

    async def remove(self, adapter_id: str) -> list[str]:
        return list((await self._call("remove_adapter", adapter_id))["addresses"])

    async def listing(self) -> list[AdapterCard]:
        return adapter_cards(await self._call("list_adapters"))

    async def _call(self, method: str, *args: str) -> dict[str, Any]:
        actor = self.link.actor if self.link is not None else None
        if actor is None:
            raise UnavailableError("the controller is not reached yet; try again")
        try:
            ref = getattr(actor, method).remote(*args)
            answer: dict[str, Any] = await asyncio.wait_for(_result(ref), ADAPTER_CHANGE_S)
        except (RayError, TimeoutError) as e:
            raise UnavailableError(f"the controller did not answer: {type(e).__name__}") from None
        if "error" in answer:
            raise from_data(answer["error"])
        return answer


def apply_spec(spec: DeploymentSpec, timeout_s: float = 60.0) -> None:
    ray.get(find_controller().apply.remote(spec_to_dict(spec)), timeout=timeout_s)


def shutdown_controller(timeout_s: float = 120.0) -> None:
    """Drain and stop every replica, then the controller itself (for good:
    Ray does not restart it), then any replica actor still left."""
    controller = find_controller()
    ray.get(controller.shutdown.remote(), timeout=timeout_s)
    ray.kill(controller, no_restart=True)
    left = kill_replicas()
    if left:
        log.warning("killed replicas the controller did not drain: %s", ", ".join(left))


def drain_cluster(address: str) -> None:
    """Drain and stop every replica before the head goes (in-flight requests
    finish, engines shut down), which also spares Ray's 30 s wait for running
    actors when its head is stopped. Failures are logged, not raised."""
    try:
        connect(address)
        shutdown_controller()
    except (ClusterError, RayError) as e:
        log.warning("could not drain the replicas before stopping Ray: %s", e)


@dataclass
class Followed:
    """The endpoint table cortex routes on, as far as the follower knows."""

    version: int = 0
    epoch: str | None = None
    # Set once the first table has reached the pool (cortex's readiness).
    received: asyncio.Event = field(default_factory=asyncio.Event)
    # The controller and the head as this cortex sees them (metrics, status).
    plane: ControlPlane | None = None
    # What the controller answers to the reports (autoscaling), if followed.
    scaling: ScalingFollower | None = None


async def follow_cluster(link: ControllerLink, pool: NeuronPool, followed: Followed) -> None:
    """Follow the endpoint table and report to the controller, for ever
    (cancelling this cancels both), and watch the head."""
    tasks = [follow_table(link, pool, followed), report_forever(link, pool, followed)]
    if followed.plane is not None:
        tasks.append(watch_head(followed.plane))
    await asyncio.gather(*tasks)


async def report_forever(
    link: ControllerLink, pool: NeuronPool, followed: Followed, interval_s: float = REPORT_S
) -> None:
    """Every `interval_s`, tell the controller this process's requests in
    flight per neuron and waiting per model (at once when a request wakes a
    model scaled to zero). Best effort: a lost controller is the follower's
    to find again, and a missed report only ages out of the status."""
    host = socket.gethostname()
    pid = os.getpid()
    poked = asyncio.Event()
    pool.wakes.on_wake = poked.set
    while True:
        poked.clear()
        plane = followed.plane
        report = CortexReport(
            instance=f"{host}:{pid}",
            host=host,
            pid=pid,
            in_flight=pool.in_flight(),
            queued=pool.waiting(),
            caps=pool.caps(),
            kv_usage=pool.kv_usage(),
            table_version=followed.version,
            head_up=plane.head_up if plane else None,
            table_age_s=plane.table_age_s() if plane else None,
            controller_restarts=plane.controller_restarts if plane else 0,
            adopted=plane.adopted if plane else 0,
        )
        try:
            answer = await asyncio.wait_for(
                _result(link.actor.report.remote(report.model_dump(mode="json"))), REPORT_S
            )
            if followed.scaling is not None and answer is not None:
                followed.scaling.apply(ScalingView.read(answer))
        except (RayError, TimeoutError, AttributeError, TypeError) as e:
            # TypeError: a controller of another version (its answer's form).
            log.debug("could not report to the controller: %s", type(e).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(poked.wait(), interval_s)


async def follow_table(
    link: ControllerLink, pool: NeuronPool, followed: Followed | None = None
) -> None:
    """Hand each new version of the endpoint table to the pool, for ever.
    While the controller cannot be reached the pool keeps the last table
    (its own health polling still takes dead neurons out) and the follower
    re-creates or finds the controller, backing off between attempts."""
    epoch: str | None = None
    version = 0
    failures = 0  # failed attempts since the last table read
    lost = False
    while True:
        try:
            # Awaited on the event loop, not in a thread: cancelling this task
            # at shutdown must not wait for the long poll to end.
            ref = link.actor.table.remote(version, POLL_S, epoch)
            table = TableView.read(await asyncio.wait_for(_result(ref), POLL_S + 10))
        except (RayError, TimeoutError) as e:
            failures += 1
            if followed is not None and followed.plane is not None:
                followed.plane.controller_lost()
            if not lost:
                lost = True
                log.warning(
                    "lost the controller (%s); routing on the last table until it is back",
                    type(e).__name__,
                )
            await asyncio.sleep(retry_delay(failures))
            try:
                await asyncio.to_thread(link.reconnect)
            except Exception as err:  # the follower must outlive any one failure
                log.warning("the controller is still unreachable: %s", err, exc_info=True)
                continue
            lost = False
            log.info("the controller is back (after %d attempts)", failures)
            continue
        if lost:
            # Answered though the last reconnect failed: Ray restarted the
            # actor itself, under the same handle.
            lost = False
            log.info("the controller is back (after %d attempts)", failures)
        failures = 0
        if table.version == 0:
            continue  # nothing published yet (still adopting): keep the last table
        if followed is not None and followed.plane is not None:
            followed.plane.table_confirmed(table.epoch, table.adopted)
        if (table.epoch, table.version) != (epoch, version):
            epoch, version = table.epoch, table.version
            if table.adapters is not None:
                pool.set_adapters(table.adapters)
            await pool.update(table.addresses)
            if followed is not None:
                followed.epoch, followed.version = epoch, version
                followed.received.set()


def retry_delay(failures: int) -> float:
    """Seconds before the next attempt to reach a lost controller: 0.5, 1,
    2 … capped at MAX_RETRY_S."""
    return float(min(0.5 * 2.0 ** min(failures - 1, 10), MAX_RETRY_S))


async def _result(ref: Any) -> Any:
    return await ref
