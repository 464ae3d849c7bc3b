"""A replica's life from the controller's side: placed (the actor created),
started (its neuron serving, or a failure that backs the model's starts
off), drained and stopped, forgotten; and the endpoint table of the ready
replicas (with the adapters served), published whenever one joins or
leaves it.

The controller (controller.py) decides which replicas to place and which to
drain; this class carries those decisions out over the `ClusterBackend`
and owns the records of the replicas it runs.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping

from axon.generations import Generation
from axon.tls import NEURON_PLAINTEXT_ENV
from cortex.cluster import decisions
from cortex.cluster.adoption import Adoption
from cortex.cluster.backend import ClusterBackend, ReplicaRequest, ReplicaStartError
from cortex.cluster.clock import Clock
from cortex.cluster.decisions import Backoff, ReplicaRecord
from cortex.cluster.failovers import FailoverLog
from cortex.cluster.placement import eligibility, label_selector
from cortex.cluster.replica_settings import replica_settings, settings_env
from cortex.cluster.scaling import Scaling
from cortex.cluster.spec import ModelSpec
from cortex.cluster.status import ReplicaState
from cortex.cluster.table import Endpoint, EndpointTable
from cortex.cluster.tasks import ReplicaTasks

log = logging.getLogger("neuraxis.controller")

# How long a neuron stopped while it starts gets to end its engine build
# (seconds, measured) before its process group is killed.
STARTING_STOP_TIMEOUT_S = 15.0


class ReplicaLifecycle:
    def __init__(
        self,
        backend: ClusterBackend,
        clock: Clock,
        scaling: Scaling,
        *,
        start_timeout_s: float,
        drain_timeout_s: float,
        plaintext: bool,
        adapters: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        """`adapters`: every adapter served now, id -> base model (in the table)."""
        self._backend = backend
        self._adapters = adapters
        self._clock = clock
        # Told each replica's load time (its model's cold-start estimate).
        self._scaling = scaling
        self._start_timeout_s = start_timeout_s
        self._drain_timeout_s = drain_timeout_s
        # ControllerConfig.plaintext, handed to each replica's neuron.
        self._plaintext = plaintext
        self.replicas: dict[str, ReplicaRecord] = {}
        self.failovers = FailoverLog()
        self.table = EndpointTable()
        self._backoff: dict[str, Backoff] = {}
        self._serials = itertools.count(1)
        self._tasks = ReplicaTasks()

    def adopted(self, adoption: Adoption) -> None:
        """The replicas a new controller found serving join the records; the
        ones it refused count as lost; new serials follow the found ones."""
        self.replicas.update(adoption.replicas)
        for running, reason in adoption.lost:
            self.failovers.lost(
                running.model, running.replica_id, reason, running.address, self._clock.time()
            )
        self._serials = itertools.count(adoption.next_serial)

    def backing_off(self, model_id: str) -> bool:
        """Whether the model's starts wait after a failed one."""
        backoff = self._backoff.get(model_id)
        return backoff is not None and self._clock.monotonic() < backoff.not_before

    def start_errors(self) -> dict[str, str]:
        """The last start failure of each model backing off, for the status."""
        return {model: b.last_error for model, b in self._backoff.items()}

    def place(self, model: ModelSpec, node_id: str | None, pinned: bool) -> None:
        """Create a replica of `model` (preferably, or if `pinned` only, on
        `node_id`) and start it in a task of its own."""
        generations = eligibility(model).generations
        serial = next(self._serials)
        replica = ReplicaRecord(
            f"{model.id}-{serial}",
            model.id,
            serial,
            created=self._clock.time(),
            # Where it is meant to go, until the backend says where it went;
            # the next placement of this pass then prefers another node.
            node_id=node_id,
        )
        replica.replaces = self.failovers.claim(model.id)
        self.replicas[replica.id] = replica
        self._backend.create(
            ReplicaRequest(
                replica.id,
                model.id,
                serial,
                model.gpus_per_replica(),
                label_selector(generations),
                replica.node_id,
                pinned,
            )
        )
        self._tasks.run(replica.id, self._start(replica, model))
        log.info(
            "placing %s (%s, %d GPUs)",
            replica.id,
            "/".join(g.value for g in generations),
            model.gpus_per_replica(),
        )

    async def _start(self, replica: ReplicaRecord, model: ModelSpec) -> None:
        try:
            placed = await self._backend.placed(replica.id)
            replica.placed(placed, self._clock.time())
            if placed.generation is None:
                raise ReplicaStartError(f"node {placed.node_id} has no generation label")
            env = settings_env(replica_settings(model, placed.generation))
            if self._plaintext:
                env[NEURON_PLAINTEXT_ENV] = "true"
            started = await self._backend.start(replica.id, env, self._start_timeout_s)
        except (ReplicaStartError, ValueError) as e:
            if replica.id in self.replicas:  # not drained or lost meanwhile
                self._start_failed(replica, model, str(e))
            return
        ready_at = self._clock.time()
        replica.serving(started, ready_at)
        self._scaling.loaded(model.id, ready_at - replica.created)
        self._backoff.pop(model.id, None)
        log.info(
            "replica %s of %s ready at %s on %s (%s)",
            replica.id,
            model.id,
            replica.address,
            replica.host,
            _name(replica.generation),
        )
        if replica.replaces is not None:
            self.failovers.replaced(replica.replaces, replica.id, started.address, ready_at)
        await self.publish()

    def _start_failed(self, replica: ReplicaRecord, model: ModelSpec, reason: str) -> None:
        backoff = self._backoff.setdefault(model.id, Backoff())
        delay = backoff.failed(reason, self._clock.monotonic())
        log.error(
            "replica %s of %s failed to start (next attempt in %.0f s): %s",
            replica.id,
            model.id,
            delay,
            reason,
        )
        if replica.replaces is not None:
            self.failovers.unclaim(replica.replaces)
        self.forget(replica)

    def drain(self, replica: ReplicaRecord) -> None:
        """Take the replica out of the table, let its neuron finish what it
        serves, then stop it (in its task; a start still running is cancelled)."""
        previous = replica.state
        replica.state = ReplicaState.DRAINING
        self._tasks.cancel(replica.id)  # still starting: nothing to drain
        self._tasks.run(replica.id, self._stop(replica, previous))
        log.info("draining %s at %s", replica.id, replica.address)

    async def _stop(self, replica: ReplicaRecord, previous: ReplicaState) -> None:
        try:
            if previous in (ReplicaState.READY, ReplicaState.UNHEALTHY):
                await self.publish()
                await self._clock.sleep(decisions.DRAIN_DELAY_S)
                await self._backend.drain(replica.id, self._drain_timeout_s)
            elif previous is ReplicaState.STARTING:
                # Its neuron may be building its engine: SIGTERM ends the
                # build and what vLLM spawned for it. Killing the actor alone
                # SIGKILLed the neuron and left its engine core running.
                await self._backend.drain(replica.id, STARTING_STOP_TIMEOUT_S)
        finally:
            self.forget(replica)
            log.info("replica %s stopped", replica.id)

    def forget(self, replica: ReplicaRecord) -> None:
        """Drop the record and kill the actor (what is left of it)."""
        self.replicas.pop(replica.id, None)
        self._backend.kill(replica.id)

    async def wait(self) -> None:
        """Until every start and stop under way has ended."""
        await self._tasks.wait()

    async def publish(self) -> None:
        """The table of the ready replicas and the adapters served, to
        cortex's long polls."""
        ready = sorted(
            (r for r in self.replicas.values() if r.state is ReplicaState.READY),
            key=lambda r: r.id,
        )
        await self.table.publish(
            [
                Endpoint(r.id, r.model, r.address or "", _name(r.generation), r.metrics_port)
                for r in ready
            ],
            self._adapters(),
        )


def _name(generation: Generation | None) -> str | None:
    return generation.value if generation is not None else None
