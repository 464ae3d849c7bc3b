"""A cluster status with every field set, shared by the tests of the status
types (tests/unit/cortex/cluster/test_status.py: the pinned JSON) and of
their rendering (tests/unit/neuraxis/test_status.py). Each test file changes
what it needs with `full_status(...)` or `model_copy`."""

from __future__ import annotations

from axon.generations import Generation
from cortex.cluster.status import (
    ClusterStatus,
    CortexStatus,
    Failover,
    ModelStatus,
    NodeStatus,
    ReplicaState,
    ReplicaStatus,
    ScalingStatus,
)

ADA = Generation.ADA

NODE = NodeStatus(
    node_id="node-1", host="10.0.0.21", generation=ADA, gpus=2, alive=True, mark="cordoned"
)
STARTING = ReplicaStatus(
    id="chat-3",
    state=ReplicaState.STARTING,
    waiting="waiting for a node with 1 free GPUs",
    address="10.0.0.21:50051",
    host="10.0.0.21",
    node_id="node-1",
    generation=ADA,
    in_flight=5,
    pid=4242,
    log="/var/lib/neuraxis/replicas/chat-3.log",
    engine_running=4,
    engine_waiting=1,
    load_age_s=1.5,
    cortex_in_flight=6,
    created_at=1800000000.0,
    placed_at=1800000001.25,
    ready_at=1800000090.5,
)
CHAT = ModelStatus(
    id="chat",
    desired=2,
    generations=[ADA],
    gpus_per_replica=1,
    unplaceable="no node of generation ada in the cluster",
    last_start_error="the neuron exited with code 1 during start-up: boom",
    replicas=[STARTING],
    autoscale=ScalingStatus(
        min_replicas=1,
        max_replicas=4,
        direction="up",
        reason="load",
        detail="35 in flight + 0 queued, target 10 per replica: 4 wanted for 10 s",
        decided_s_ago=12.5,
    ),
    adapters=["support", "legal"],
)
FAILOVER = Failover(
    model="chat",
    replica="chat-1",
    reason="its actor is gone (RayActorError)",
    failed_at=1800000000.5,
    address="10.0.0.22:50051",
    replacement="chat-3",
    replacement_address="10.0.0.21:50051",
    ready_at=1800000003.0,
    seconds_to_ready=2.5,
)
CORTEX = CortexStatus(
    instance="gw-1:4711",
    host="gw-1",
    pid=4711,
    in_flight=6,
    table_version=7,
    reported_s_ago=0.8,
    head_up=False,
    table_age_s=42.5,
    controller_restarts=2,
    adopted=3,
)


def full_status(
    nodes: list[NodeStatus] | None = None,
    models: list[ModelStatus] | None = None,
    failovers: list[Failover] | None = None,
    cortices: list[CortexStatus] | None = None,
) -> ClusterStatus:
    """The status of one of each above (or of the lists given), with the
    controller's own fields set too."""
    return ClusterStatus(
        nodes=[NODE] if nodes is None else nodes,
        models=[CHAT] if models is None else models,
        failovers=[FAILOVER] if failovers is None else failovers,
        version=7,
        passes=12,
        cortices=[CORTEX] if cortices is None else cortices,
        epoch="0123456789abcdef",
        adopted=1,
    )
