"""Each ready replica's LoRA adapters kept equal to its model's in the
spec the controller serves: the ones missing loaded (LoadAdapter), the ones
left over unloaded (UnloadAdapter: once their requests there have ended),
and the ones served from another source than the spec's now (an id
removed and added again from a new directory) unloaded, then loaded anew.

A replica is started with its model's adapters (replica_settings.py), so
most need nothing; the rest are the replicas that were starting, or
unreachable, when an adapter was added or removed, and those a new
controller adopted while it was down. What each replica was last made to
serve is remembered, so a replica is asked (one Info) only when that may
differ from what its model wants now. One sync at a time per replica: a
remove's unload may wait for long streams, and a sync must not read the
neuron's adapters while another one changes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from axon.errors import ModelNotFoundError, NeuraxisError
from cortex.cluster.backend import ClusterBackend
from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.spec import DeploymentSpec, ModelSpec
from cortex.cluster.status import ReplicaState

log = logging.getLogger("neuraxis.controller")


def wanted(model: ModelSpec) -> dict[str, str]:
    """The adapters a replica of `model` should serve: id → source."""
    return {a.id: a.source for a in model.adapters} if model.lora is not None else {}


def stale(synced: dict[str, str] | None, served: set[str], adapters: dict[str, str]) -> set[str]:
    """The adapters a replica serves from another source than `adapters`
    say, as far as `synced` (what this controller last made true there)
    knows: an id removed and added again from a new source while the
    replica kept the old one (it was not answering, or the remove's unload
    had not reached it). Sources are compared here because a neuron's Info
    names its adapters, not where they came from: a replica this controller
    never synced (one adopted) is taken to serve what it should."""
    if synced is None:
        return set()
    return {a for a in served & adapters.keys() if a in synced and synced[a] != adapters[a]}


class AdapterSync:
    def __init__(self, backend: ClusterBackend, serving: Callable[[], DeploymentSpec]) -> None:
        """`serving`: the spec the controller serves now."""
        self._backend = backend
        self._serving = serving
        # Per replica id: the adapters last made true on its neuron.
        self._synced: dict[str, dict[str, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def sync(self, replica_id: str, want: Callable[[], dict[str, str]]) -> None:
        """Make the replica serve exactly the adapters `want()` says when
        its turn comes (read then: a sync queued behind a change must not
        undo it); the first failure raised (as a NeuraxisError) once every
        change was tried."""
        lock = self._locks.setdefault(replica_id, asyncio.Lock())
        async with lock:
            adapters = want()
            if self._synced.get(replica_id) == adapters:
                return
            served = set((await self._backend.adapters(replica_id)).served)
            changes = [
                *(
                    self._backend.load_adapter(replica_id, a, source)
                    for a, source in adapters.items()
                    if a not in served
                ),
                *(
                    self._reload(replica_id, a, adapters[a])
                    for a in sorted(stale(self._synced.get(replica_id), served, adapters))
                ),
                *(self._unload(replica_id, a) for a in sorted(served - set(adapters))),
            ]
            outcomes = await asyncio.gather(*changes, return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            self._synced[replica_id] = dict(adapters)

    async def _reload(self, replica_id: str, adapter_id: str, source: str) -> None:
        # Off first: a neuron asked to load an id it holds keeps the weights
        # it has (neuron/engine/adapters.py), whatever the new source.
        await self._unload(replica_id, adapter_id)
        await self._backend.load_adapter(replica_id, adapter_id, source)

    async def _unload(self, replica_id: str, adapter_id: str) -> None:
        # Gone already: another sync's, or the neuron restarted.
        with contextlib.suppress(ModelNotFoundError):
            await self._backend.unload_adapter(replica_id, adapter_id)

    def step(self, replicas: Iterable[ReplicaRecord]) -> None:
        """A controller pass: every ready replica whose adapters may differ
        from its model's is synced in the background; a failure is logged
        and tried again at the next pass."""
        spec = self._serving()
        live: set[str] = set()
        for replica in replicas:
            live.add(replica.id)
            model = spec.model(replica.model)
            if replica.state is not ReplicaState.READY or model is None or model.lora is None:
                continue
            if self._synced.get(replica.id) == wanted(model) or replica.id in self._tasks:
                continue
            task = asyncio.create_task(self._background(replica.id, self.wants(replica.model)))
            self._tasks[replica.id] = task
        for gone in set(self._synced) - live:
            self._synced.pop(gone, None)
            self._locks.pop(gone, None)

    def wants(self, model_id: str) -> Callable[[], dict[str, str]]:
        """What a replica of `model_id` should serve, asked when needed."""

        def now() -> dict[str, str]:
            model = self._serving().model(model_id)
            return wanted(model) if model is not None else {}

        return now

    async def _background(self, replica_id: str, want: Callable[[], dict[str, str]]) -> None:
        try:
            await self.sync(replica_id, want)
        except NeuraxisError as e:
            log.warning("replica %s: its adapters could not be synced: %s", replica_id, e)
        except Exception:  # the next pass tries again; this must not kill the loop
            log.exception("replica %s: its adapters could not be synced", replica_id)
        finally:
            self._tasks.pop(replica_id, None)

    async def stop(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
