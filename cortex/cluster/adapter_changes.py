"""LoRA adapters added and removed at run time (`neuraxis adapters add |
remove`), kept beside the applied deployment spec rather than in it.

The spec is what cortex (or `neuraxis cluster apply`) handed the
controller; the changes are the operators' since. The controller serves
`effective(spec, changes)`: the spec's adapters less the removed ones,
plus the added ones. Keeping them apart is what lets them outlive the
controller: cortex re-applies its own spec file to a controller that came
back, and the changes (saved in the cluster, ray_backend.py) are laid over
it again. A spec entry wins over an added adapter of the same id (the
operator wrote it into the file since); an added adapter whose model has
left the spec is kept, unserved, until that model comes back.

Pure: the controller (adapter_sync.py) saves the changes and tells the
replicas; the checks here refuse a change before anything is touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from axon.adapters import AdapterSourceError, check_adapter
from axon.errors import InvalidRequestError, ModelNotFoundError
from cortex.cluster.spec import AdapterSpec, DeploymentSpec

# An id is spelled ID=DIR on the neuron's command line (axon/adapters.py):
# no '=' in it, and no white space a client could not type.
_BAD_ID = re.compile(r"[=\s]")


@dataclass(frozen=True)
class AddedAdapter:
    model: str
    id: str
    source: str


@dataclass(frozen=True)
class AdapterChanges:
    """The adapters added at run time (in the order added) and the ids of
    the spec's adapters removed at run time."""

    added: tuple[AddedAdapter, ...] = ()
    removed: frozenset[str] = field(default_factory=frozenset)

    def to_data(self) -> dict[str, Any]:
        return {
            "added": [{"model": a.model, "id": a.id, "source": a.source} for a in self.added],
            "removed": sorted(self.removed),
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> AdapterChanges:
        added = tuple(AddedAdapter(a["model"], a["id"], a["source"]) for a in data["added"])
        return cls(added, frozenset(data["removed"]))


def effective(spec: DeploymentSpec, changes: AdapterChanges) -> DeploymentSpec:
    """The spec the controller serves: `spec` with the changes laid over it."""
    kept = {a.id for m in spec.models for a in m.adapters if a.id not in changes.removed}
    taken = {m.id for m in spec.models} | kept
    models = []
    for model in spec.models:
        adapters = [a for a in model.adapters if a.id in kept]
        if model.lora is not None:
            for added in changes.added:
                if added.model == model.id and added.id not in taken:
                    adapters.append(AdapterSpec(id=added.id, source=added.source))
                    taken.add(added.id)
        models.append(model.model_copy(update={"adapters": adapters}))
    return spec.model_copy(update={"models": models})


def adding(
    spec: DeploymentSpec, changes: AdapterChanges, model_id: str, adapter_id: str, source: str
) -> AdapterChanges:
    """The changes with adapter `adapter_id` of `model_id` at `source`
    added; InvalidRequestError or ModelNotFoundError (with the reason, and
    the param at fault) when it cannot be served. The source is read here,
    where the controller runs (cortex's host, as for the spec's adapters)."""
    serving = effective(spec, changes)
    model = serving.model(model_id)
    if model is None:
        raise ModelNotFoundError(
            f"The model '{model_id}' is not in the deployment spec.", param="model"
        )
    if model.lora is None:
        raise InvalidRequestError(
            f"The model '{model_id}' takes no adapters: its spec has no [models.lora] table.",
            param="model",
        )
    if not adapter_id or _BAD_ID.search(adapter_id):
        raise InvalidRequestError(
            f"'{adapter_id}' cannot be an adapter's id (no '=' nor white space).", param="id"
        )
    if serving.model(adapter_id) is not None or adapter_id in serving.adapters():
        raise InvalidRequestError(f"'{adapter_id}' is already a model's id.", param="id")
    if not PurePosixPath(source).is_absolute():
        raise InvalidRequestError(
            f"The adapter's source '{source}' is not an absolute path: every replica's host "
            "reads it.",
            param="source",
        )
    try:
        check_adapter(source, model.lora.max_rank, (model.source, model.id))
    except AdapterSourceError as e:
        raise InvalidRequestError(str(e), param="source") from None
    added = tuple(a for a in changes.added if a.id != adapter_id)
    return AdapterChanges((*added, AddedAdapter(model_id, adapter_id, source)), changes.removed)


def removing(
    spec: DeploymentSpec, changes: AdapterChanges, adapter_id: str
) -> tuple[AdapterChanges, str]:
    """The changes with `adapter_id` removed, and its base model's id;
    ModelNotFoundError when no adapter has that id."""
    parent = effective(spec, changes).adapters().get(adapter_id)
    if parent is None:
        raise ModelNotFoundError(f"The model '{adapter_id}' does not exist.")
    added = tuple(a for a in changes.added if a.id != adapter_id)
    removed = changes.removed | ({adapter_id} if adapter_id in spec.adapters() else set())
    return AdapterChanges(added, frozenset(removed)), parent


def added_at_run_time(spec: DeploymentSpec, changes: AdapterChanges, adapter_id: str) -> bool:
    """Whether the served adapter `adapter_id` is one of the changes' rather
    than the spec's own entry."""
    return adapter_id not in spec.adapters() or adapter_id in changes.removed
