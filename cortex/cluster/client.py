"""cortex's side of cluster mode: joining the Ray cluster as a driver,
starting or finding the controller, and following its endpoint table.

The table is long-polled from the controller in a background task and handed
to the neuron pool; requests never wait on Ray.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray
from ray.exceptions import AuthenticationError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cortex.cluster.ray_backend import CONTROLLER_NAME, NAMESPACE, ControllerActor
from cortex.cluster.spec import DeploymentSpec, spec_to_dict
from cortex.cluster.status import ClusterStatus
from cortex.routing.pool import NeuronPool
from neuraxis.core.tls import TlsFiles

log = logging.getLogger("neuraxis.cortex")

# How long one long poll of the table may wait for a change.
POLL_S = 20.0


class ClusterError(Exception):
    """The Ray cluster or the controller cannot be reached."""


def connect(address: str) -> None:
    """Join the Ray cluster at `address` as a driver (once per process)."""
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


def ensure_controller(
    spec: DeploymentSpec,
    health_interval_s: float,
    start_timeout_s: float = 900.0,
    tls: TlsFiles | None = None,
) -> Any:
    """Start the controller, or find the one already running, and give it
    the spec. It runs on the head node (which leaves only with the cluster),
    detached from this process, so that a cortex restart leaves the replicas
    serving."""
    here = _head_node_id() or ray.get_runtime_context().get_node_id()
    controller: Any = ControllerActor.options(
        name=CONTROLLER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=1000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    ).remote(health_interval_s=health_interval_s, start_timeout_s=start_timeout_s, tls=tls)
    ray.get(controller.apply.remote(spec_to_dict(spec)))
    return controller


def _head_node_id() -> str | None:
    for node in ray.nodes():  # type: ignore[no-untyped-call]
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
        return ClusterStatus.from_dict(result)
    except (TypeError, KeyError, ValueError) as e:
        # A controller left running by another version of neuraxis.
        raise ClusterError(f"the controller's status is not in this version's form: {e}") from None


def apply_spec(spec: DeploymentSpec, timeout_s: float = 60.0) -> None:
    ray.get(find_controller().apply.remote(spec_to_dict(spec)), timeout=timeout_s)


def shutdown_controller(timeout_s: float = 120.0) -> None:
    """Drain and stop every replica, then the controller itself."""
    controller = find_controller()
    ray.get(controller.shutdown.remote(), timeout=timeout_s)
    ray.kill(controller)


def drain_cluster(address: str) -> None:
    """Drain and stop every replica before the head goes (in-flight requests
    finish, engines shut down), which also spares Ray's 30 s wait for running
    actors when its head is stopped. Failures are logged, not raised."""
    try:
        connect(address)
        shutdown_controller()
    except (ClusterError, RayError) as e:
        log.warning("could not drain the replicas before stopping Ray: %s", e)


async def follow_table(controller: Any, pool: NeuronPool) -> None:
    """Hand each new version of the endpoint table to the pool, for ever.
    While the controller cannot be reached the pool keeps the last table
    (its own health polling still takes dead neurons out)."""
    version = 0
    while True:
        try:
            # Awaited on the event loop, not in a thread: cancelling this task
            # at shutdown must not wait for the long poll to end.
            ref = controller.table.remote(version, POLL_S)
            table: dict[str, Any] = await asyncio.wait_for(_result(ref), POLL_S + 10)
        except (RayError, TimeoutError) as e:
            log.warning("cannot read the endpoint table (%s); retrying", type(e).__name__)
            await asyncio.sleep(2.0)
            try:
                controller = await asyncio.to_thread(find_controller)
            except ClusterError as err:
                log.warning("%s", err)
            continue
        if table["version"] != version:
            version = table["version"]
            await pool.update([r["address"] for r in table["replicas"]])


async def _result(ref: Any) -> Any:
    return await ref
