"""What a new controller makes of the replicas it finds running (detached
actors outlive a controller): the serving ones are adopted as they are, with
their ids, addresses and neurons, and no engine reload; the others are
killed, and those that had served count as lost (their replacement is
recorded as a failover)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from cortex.cluster import decisions
from cortex.cluster.backend import ClusterBackend, Placed, RunningReplica
from cortex.cluster.decisions import ReplicaRecord

log = logging.getLogger("neuraxis.controller")


@dataclass
class Adoption:
    replicas: dict[str, ReplicaRecord] = field(default_factory=dict)
    # Refused replicas that had served, and why: lost, to be replaced.
    lost: list[tuple[RunningReplica, str]] = field(default_factory=list)
    next_serial: int = 1  # the first serial no replica found running has


async def adopt(backend: ClusterBackend, monotonic: float) -> Adoption:
    """Check every replica running in the cluster, adopt the serving ones
    and kill the rest. `monotonic` is the controller's clock."""
    found = await backend.replicas()
    health = await asyncio.gather(*(backend.check(r.replica_id) for r in found))
    adoption = Adoption(next_serial=decisions.next_serial(found))
    for running, checked in zip(found, health, strict=True):
        refusal = decisions.adoption_refusal(running, checked)
        if refusal is not None:
            log.warning(
                "not adopting replica %s of %s: %s", running.replica_id, running.model, refusal
            )
            backend.kill(running.replica_id)
            if running.address is not None:
                adoption.lost.append((running, refusal))
            continue
        replica = ReplicaRecord(running.replica_id, running.model, running.serial, running.created)
        replica.placed(Placed(running.node_id, running.host, running.generation))
        assert running.started is not None  # adoption_refusal: it reported SERVING
        replica.serving(running.started, running.started_at)
        replica.record_load(checked, monotonic)
        adoption.replicas[replica.id] = replica
        log.info("adopted replica %s of %s at %s", replica.id, replica.model, replica.address)
    if found:
        log.info("adopted %d of %d replicas found running", len(adoption.replicas), len(found))
    return adoption
