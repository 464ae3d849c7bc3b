"""The controller's decisions, as pure functions over plain data: whether a
replica found running is adopted, the health verdict on one check, the
start-failure back-off, which replicas a scale-down drains and which a
draining node gives up, which replica a rebalance moves, and which node
the next replica prefers (why a pending replica still waits is the
status's: status.py).

Nothing here acts, sleeps or reads a clock: the controller (controller.py)
passes the time in and carries out what these return. Placement eligibility
and unplaceable reasons are in placement.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from axon.generations import Generation
from cortex.cluster.backend import Health, Liveness, Placed, RunningReplica, Started
from cortex.cluster.placement import NodeView, eligibility, preferred_node
from cortex.cluster.spec import DeploymentSpec, ModelSpec
from cortex.cluster.status import Failure, ReplicaState

# Consecutive failed health checks before a replica leaves the table, and
# before it is replaced.
UNHEALTHY_AFTER = 3
REPLACE_AFTER = 10
# Start failures of a model back off up to this long between attempts.
MAX_BACKOFF_S = 60.0
# How long a node where a replica's actor died (perhaps with the node, which
# the cluster reports dead only seconds later) is not preferred for new ones.
SUSPECT_S = 15.0
# At most one replica of a model moved to another node this often.
REBALANCE_EVERY_S = 10.0
# Time between taking a draining replica out of the table and stopping it,
# so that cortex stops picking it first.
DRAIN_DELAY_S = 1.0

# A scale-down drains the replicas that serve least first.
_DRAIN_ORDER = [
    ReplicaState.PENDING,
    ReplicaState.STARTING,
    ReplicaState.UNHEALTHY,
    ReplicaState.READY,
]


@dataclass
class ReplicaRecord:
    """What the controller knows of one replica."""

    id: str
    model: str
    serial: int  # the order of creation: a higher one is newer
    created: float  # wall time
    state: ReplicaState = ReplicaState.PENDING
    # Where placement asked for it, until the backend says where it went.
    node_id: str | None = None
    host: str | None = None
    generation: Generation | None = None
    address: str | None = None
    metrics_port: int | None = None
    pid: int | None = None
    log: str | None = None
    failures: int = 0  # consecutive failed health checks
    # The engine's running and waiting requests at the last health check
    # that could read them, and when (the controller's clock).
    engine_running: int | None = None
    engine_waiting: int | None = None
    load_at: float | None = None
    ready_at: float | None = None
    placed_at: float | None = None  # wall time (None: adopted, or not placed yet)
    replaces: Failure | None = None  # the lost replica this one replaces

    def placed(self, where: Placed, now: float | None = None) -> None:
        """The backend put it on a node (at wall time `now`; None: unknown):
        its neuron starts there."""
        self.node_id, self.host, self.generation = where.node_id, where.host, where.generation
        self.state = ReplicaState.STARTING
        self.placed_at = now

    def serving(self, started: Started, now: float | None) -> None:
        """Its neuron answers SERVING (since wall time `now`; None: unknown)."""
        self.address, self.metrics_port = started.address, started.metrics_port
        self.pid, self.log = started.pid, started.log
        self.state = ReplicaState.READY
        self.ready_at = now

    def record_load(self, health: Health, at: float) -> None:
        """Keep the engine's counts from a check that could read them."""
        if health.running is not None and health.waiting is not None:
            self.engine_running, self.engine_waiting = health.running, health.waiting
            self.load_at = at


@dataclass(frozen=True)
class Verdict:
    """What one health check means for a replica: its new state and failure
    count, or, when `lost` is set, that it must be replaced (`node_suspect`:
    its node may be gone too)."""

    state: ReplicaState
    failures: int
    lost: str | None = None
    node_suspect: bool = False


def health_verdict(state: ReplicaState, failures: int, health: Health) -> Verdict:
    """The verdict on a READY or UNHEALTHY replica after one check."""
    if health.liveness is Liveness.GONE:
        return Verdict(state, failures, f"its actor is gone ({health.detail})", node_suspect=True)
    if health.liveness is Liveness.EXITED:
        return Verdict(state, failures, f"its neuron exited with code {health.detail}")
    if health.liveness is Liveness.SERVING:
        return Verdict(ReplicaState.READY, 0)
    failures += 1
    if failures >= REPLACE_AFTER:
        return Verdict(state, failures, f"not SERVING for {failures} checks")
    if failures >= UNHEALTHY_AFTER:
        return Verdict(ReplicaState.UNHEALTHY, failures)
    return Verdict(state, failures)


def adoption_refusal(running: RunningReplica, health: Health) -> str | None:
    """Why a replica found running (by a controller that did not start it)
    is not adopted, or None to adopt it as it is: only a replica whose
    neuron reported SERVING to its actor and answers SERVING now is."""
    if running.address is None:
        return "its neuron never reported SERVING (the controller left during its start)"
    if health.liveness is not Liveness.SERVING:
        return f"{health.liveness.value} ({health.detail})"
    return None


def next_serial(found: list[RunningReplica]) -> int:
    """The first serial after every replica found running, so that a new
    replica's id (its actor's name) is never one already taken."""
    return max((r.serial for r in found), default=0) + 1


def backoff_delay(failures: int) -> float:
    """Seconds before the next start of a model whose starts failed
    `failures` times in a row: 2, 4, 8 … capped at 60."""
    return min(2.0 ** min(failures, 16), MAX_BACKOFF_S)


@dataclass
class Backoff:
    failures: int = 0
    not_before: float = 0.0  # monotonic
    last_error: str = ""

    def failed(self, reason: str, now: float) -> float:
        """One more failed start at `now` (monotonic); the delay it adds."""
        self.failures += 1
        delay = backoff_delay(self.failures)
        self.not_before = now + delay
        self.last_error = reason
        return delay


def moved_off(
    staying: list[ReplicaRecord], leaving: list[ReplicaRecord], desired: int
) -> list[ReplicaRecord]:
    """Which replicas on draining nodes drain now: those not serving at once,
    the serving ones (oldest first) as the ready replicas `staying` keep the
    model's ready count where it was."""
    ready_elsewhere = sum(1 for r in staying if r.state is ReplicaState.READY)
    serving = [r for r in leaving if r.state is ReplicaState.READY]
    can_go = ready_elsewhere + len(serving) - max(desired, len(serving))
    idle = [r for r in leaving if r not in serving]
    return idle + sorted(serving, key=lambda r: r.serial)[: max(0, can_go)]


def scale_down_victims(
    active: list[ReplicaRecord], desired: int, in_flight: Mapping[str, int] | None = None
) -> list[ReplicaRecord]:
    """The replicas to drain when more than `desired` are active: those not
    serving yet first, then the ones with the fewest requests in flight
    (`in_flight` by replica id: the drain then waits the least), then the
    newest."""
    surplus = len(active) - desired
    if surplus <= 0:
        return []
    load = in_flight or {}
    ranked = sorted(
        active, key=lambda r: (_DRAIN_ORDER.index(r.state), load.get(r.id, 0), -r.serial)
    )
    return ranked[:surplus]


@dataclass(frozen=True)
class Usage:
    """The cluster's replicas per node: the models they serve (draining ones
    left out: they are leaving) and the GPUs they hold (draining ones
    included: they still hold them)."""

    models: dict[str, list[str]] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)


def usage(replicas: list[ReplicaRecord], spec: DeploymentSpec) -> Usage:
    found = Usage()
    for replica in replicas:
        if replica.node_id is None:
            continue
        model = spec.model(replica.model)
        gpus = model.gpus_per_replica() if model else 0
        found.gpus[replica.node_id] = found.gpus.get(replica.node_id, 0) + gpus
        if replica.state is not ReplicaState.DRAINING:
            found.models.setdefault(replica.node_id, []).append(replica.model)
    return found


def avoided_nodes(suspect: dict[str, float], now: float) -> frozenset[str]:
    """Nodes still under suspicion at monotonic time `now`."""
    return frozenset(node for node, until in suspect.items() if until > now)


def next_node(
    model: ModelSpec,
    nodes: list[NodeView],
    replicas: list[ReplicaRecord],
    spec: DeploymentSpec,
    avoid: frozenset[str],
) -> str | None:
    """The node the next replica of `model` should go to, or None for no
    preference."""
    used = usage(replicas, spec)
    return preferred_node(model, nodes, used.models, avoid, used.gpus)


def least_loaded_node(
    model: ModelSpec, nodes: list[NodeView], replicas: list[ReplicaRecord]
) -> str | None:
    """Any live node of an allowed generation, the one holding the fewest
    replicas first (a second replica of a model on one node is better than
    none while others are cordoned); None when there is none."""
    wanted = set(eligibility(model).generations)
    held = Counter(r.node_id for r in replicas if r.state is not ReplicaState.DRAINING)
    fits = [n for n in nodes if n.alive and n.generation in wanted]
    return min(fits, key=lambda n: (held[n.node_id], n.node_id)).node_id if fits else None


def rebalance_mover(
    active: list[ReplicaRecord], has_free_node: bool, last_move: float, now: float
) -> ReplicaRecord | None:
    """When a node holds several replicas of a model (a replacement had
    nowhere else to go), every replica is ready, an eligible node with room
    holds none (`has_free_node`) and the model's last move was at least
    REBALANCE_EVERY_S ago: the newest replica on a crowded node, to be
    drained (the next pass places its replacement on the free node)."""
    if len(active) < 2 or any(r.state is not ReplicaState.READY for r in active):
        return None
    if now - last_move < REBALANCE_EVERY_S or not has_free_node:
        return None
    per_node = Counter(r.node_id for r in active)
    crowded = [r for r in active if per_node[r.node_id] > 1]
    if not crowded:
        return None
    return max(crowded, key=lambda r: r.serial)
