"""`neuraxis adapters add | remove | list` (and cortex's admin POST and
DELETE /v1/adapters in cluster mode) as the controller carries them out.

add: the change is checked first (adapter_changes.adding: the model, the
id, the source's adapter_config.json against the model's max_rank and
base), then the adapter is loaded on one ready replica of the model; only
when that replica took it is the change saved and the adapter loaded on
the model's other ready replicas. A refusal at either step leaves the
spec, the saved changes and every other replica as they were. remove
saves the change first (new requests for the adapter are refused at once
by each neuron as it is told), then unloads it everywhere; the unloads
wait for the adapter's requests in flight. A replica that could not be
told now (starting, unreachable) is synced by a later pass
(adapter_sync.py), as is every replica a later controller adopts.

The answers are plain data for the Ray actor (ray_backend.py): a change's
outcome, or {"error": axon.errors.as_data(...)}.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from axon.errors import NeuraxisError, caused_by_request
from cortex.cluster import adapter_changes
from cortex.cluster.adapter_changes import AdapterChanges
from cortex.cluster.adapter_sync import AdapterSync, wanted
from cortex.cluster.backend import ClusterBackend
from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.spec import DeploymentSpec
from cortex.cluster.status import ReplicaState

log = logging.getLogger("neuraxis.controller")


class ControllerAdapters:
    def __init__(
        self,
        backend: ClusterBackend,
        replicas: Callable[[], Iterable[ReplicaRecord]],
        changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`changed`: called once a change is saved (the table published)."""
        self._backend = backend
        self._replicas = replicas
        self._changed = changed
        self.sync = AdapterSync(backend, lambda: self.serving)
        self._applied = DeploymentSpec()
        self._changes = AdapterChanges()
        # The spec the controller serves: the applied one and the changes
        # (made again whenever either changes, not at each read).
        self.serving = DeploymentSpec()
        # One change at a time: each is checked against the one before.
        self._changing = asyncio.Lock()

    async def load(self) -> None:
        """The changes the last controller saved (a new controller's first step)."""
        saved = await self._backend.load_adapter_changes()
        if saved is not None:
            self._changes = AdapterChanges.from_data(saved)
            self.serving = adapter_changes.effective(self._applied, self._changes)

    def apply(self, spec: DeploymentSpec) -> DeploymentSpec:
        """A (new) applied spec; the spec to serve, the changes over it."""
        self._applied = spec
        self.serving = adapter_changes.effective(spec, self._changes)
        served = self.serving.adapters()
        for added in self._changes.added:
            if added.id not in served:
                log.warning(
                    "adapter %s (added at run time) is not served under this spec: its model "
                    "%s is not in it, has no [models.lora], or the spec has that id",
                    added.id,
                    added.model,
                )
        return self.serving

    async def add(self, model_id: str, adapter_id: str, source: str) -> dict[str, Any]:
        async with self._changing:
            changes = adapter_changes.adding(
                self._applied, self._changes, model_id, adapter_id, source
            )
            model = adapter_changes.effective(self._applied, changes).model(model_id)
            assert model is not None  # adding() checked it
            adapters = wanted(model)
            ready = self._ready(model_id)
            told: list[ReplicaRecord] = []
            if ready:
                first = ready.pop(0)
                try:
                    # Before the change is saved: this replica alone, told
                    # what the model will serve.
                    await self.sync.sync(first.id, lambda: adapters)
                except NeuraxisError as e:
                    if caused_by_request(e):
                        await self._take_back(first.id, adapter_id)
                        raise
                    ready.insert(0, first)  # not told: with the others, below
                else:
                    told.append(first)
            await self._save(changes)
        log.info("adapter %s of %s added at run time from %s", adapter_id, model_id, source)
        done, pending = await self._sync_all(ready, model_id)
        return {
            "id": adapter_id,
            "model": model_id,
            "source": source,
            **_told([*told, *done]),
            "pending": pending,
        }

    async def remove(self, adapter_id: str) -> dict[str, Any]:
        async with self._changing:
            changes, model_id = adapter_changes.removing(self._applied, self._changes, adapter_id)
            await self._save(changes)
        log.info("adapter %s of %s removed at run time", adapter_id, model_id)
        done, pending = await self._sync_all(self._ready(model_id), model_id)
        return {"id": adapter_id, "model": model_id, **_told(done), "pending": pending}

    async def listing(self) -> dict[str, Any]:
        """Every adapter served: its model, source, whether it was added at
        run time, the ready replicas that serve it and those whose engines
        hold it now; the replicas that did not answer; and each ready
        replica's address (the admin listener names replicas by address)."""
        spec = self.serving
        replicas = [r for m in spec.models if m.lora for r in self._ready(m.id)]
        found = await asyncio.gather(
            *(self._backend.adapters(r.id) for r in replicas), return_exceptions=True
        )
        served: dict[str, list[str]] = {}
        held: dict[str, list[str]] = {}
        unreachable: list[str] = []
        for replica, answer in zip(replicas, found, strict=True):
            if isinstance(answer, BaseException):
                unreachable.append(replica.id)
                continue
            for a in answer.served:
                served.setdefault(a, []).append(replica.id)
            for a in answer.held:
                held.setdefault(a, []).append(replica.id)
        adapters = [
            {
                "id": a.id,
                "model": m.id,
                "source": a.source,
                "added_at_run_time": adapter_changes.added_at_run_time(
                    self._applied, self._changes, a.id
                ),
                "replicas": sorted(served.get(a.id, [])),
                "held_by": sorted(held.get(a.id, [])),
            }
            for m in spec.models
            for a in m.adapters
        ]
        addresses = {r.id: r.address for r in replicas if r.address}
        return {"adapters": adapters, "unreachable": sorted(unreachable), "addresses": addresses}

    def _ready(self, model_id: str) -> list[ReplicaRecord]:
        return sorted(
            (r for r in self._replicas() if r.model == model_id and r.state is ReplicaState.READY),
            key=lambda r: r.serial,
        )

    async def _save(self, changes: AdapterChanges) -> None:
        await self._backend.save_adapter_changes(changes.to_data())
        self._changes = changes
        self.serving = adapter_changes.effective(self._applied, changes)
        if self._changed is not None:
            await self._changed()

    async def _take_back(self, replica_id: str, adapter_id: str) -> None:
        """After a refused load: the neuron may have kept the adapter in its
        catalogue; it is not to serve it."""
        # Not there: nothing to take back.
        with contextlib.suppress(NeuraxisError):
            await self._backend.unload_adapter(replica_id, adapter_id)

    async def _sync_all(
        self, replicas: list[ReplicaRecord], model_id: str
    ) -> tuple[list[ReplicaRecord], dict[str, str]]:
        """Sync each of the model's `replicas` now: the ones done, and why
        each other is not (a later pass tries it again)."""
        want = self.sync.wants(model_id)
        outcomes = await asyncio.gather(
            *(self.sync.sync(r.id, want) for r in replicas), return_exceptions=True
        )
        done: list[ReplicaRecord] = []
        pending: dict[str, str] = {}
        for replica, outcome in zip(replicas, outcomes, strict=True):
            if isinstance(outcome, NeuraxisError):
                pending[replica.id] = str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                done.append(replica)
        return done, pending


def _told(replicas: list[ReplicaRecord]) -> dict[str, list[str]]:
    """The replicas told now: their ids (the CLI's) and addresses (the admin
    listener's, as its GET /v1/adapters names replicas)."""
    return {
        "replicas": sorted(r.id for r in replicas),
        "addresses": sorted(r.address for r in replicas if r.address),
    }
