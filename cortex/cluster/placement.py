"""Where a model's replicas may run: pure decisions, no Ray calls.

Ray does the placing (an actor with a GPU count and a label selector on the
generation label); this module decides what to ask Ray for, and says why
when no node of the cluster could ever satisfy it, so that the controller
reports the reason instead of leaving an actor pending forever.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon.generations import (
    GENERATION_LABEL,
    Generation,
    UnsupportedGpuError,
    check_model_options,
)
from cortex.cluster.spec import ModelSpec


@dataclass(frozen=True)
class NodeView:
    node_id: str
    host: str
    generation: Generation | None  # None: the node has no generation label
    gpus: int
    alive: bool


@dataclass(frozen=True)
class Eligibility:
    generations: list[Generation]
    # Allowed generations whose profile cannot run the model, and why.
    refused: dict[Generation, str]


def eligibility(model: ModelSpec) -> Eligibility:
    """The allowed generations that can run the model's engine options."""
    ok: list[Generation] = []
    refused: dict[Generation, str] = {}
    for generation in model.allowed_generations():
        try:
            check_model_options(generation, model.engine.quantization, model.engine.kv_cache_dtype)
        except UnsupportedGpuError as e:
            refused[generation] = str(e)
        else:
            ok.append(generation)
    return Eligibility(ok, refused)


def label_selector(generations: list[Generation]) -> dict[str, str]:
    return {GENERATION_LABEL: f"in({','.join(g.value for g in generations)})"}


def unplaceable_reason(model: ModelSpec, nodes: list[NodeView]) -> str | None:
    """Why no node of the cluster can ever hold a replica of the model, or
    None when at least one can (it may still be busy)."""
    elig = eligibility(model)
    if not elig.generations:
        return "; ".join(elig.refused.values())
    wanted = set(elig.generations)
    names = ", ".join(g.value for g in elig.generations)
    matching = [n for n in nodes if n.alive and n.generation in wanted]
    if not matching:
        present = sorted({n.generation.value for n in nodes if n.alive and n.generation})
        have = ", ".join(present) or "none"
        return f"no node of generation {names} in the cluster (generations present: {have})"
    need = model.gpus_per_replica()
    if need and max(n.gpus for n in matching) < need:
        most = max(n.gpus for n in matching)
        return f"a replica needs {need} GPUs on one {names} node; the largest has {most}"
    return None


def no_room_reason(
    model: ModelSpec, nodes: list[NodeView], used_gpus: dict[str, int]
) -> str | None:
    """Why no schedulable node has room for one more replica of `model` now
    (its GPUs are held by other replicas), naming the generations where a
    freed or added node would take it; None when one has room."""
    need = model.gpus_per_replica()
    wanted = set(eligibility(model).generations)
    if not need or any(
        n.alive and n.generation in wanted and n.gpus - used_gpus.get(n.node_id, 0) >= need
        for n in nodes
    ):
        return None
    names = ", ".join(g.value for g in eligibility(model).generations)
    return (
        f"no room for another replica: no node has {need} free GPUs; "
        f"it would fit on a node of generation {names} with {need} free"
    )


def preferred_node(
    model: ModelSpec,
    nodes: list[NodeView],
    replicas: dict[str, list[str]],
    avoid: frozenset[str] = frozenset(),
    used_gpus: dict[str, int] | None = None,
) -> str | None:
    """A node for the next replica of `model` that holds none of its replicas
    yet (so that losing one node loses one replica), the least loaded first;
    None when every eligible node already holds one. `replicas` maps a node id
    to the models of the replicas on it, `used_gpus` to the GPUs they hold;
    `avoid` holds nodes where a replica just died (a node that left still
    looks alive until Ray notices)."""
    used = used_gpus or {}
    wanted = set(eligibility(model).generations)
    need = model.gpus_per_replica()
    free = [
        n
        for n in nodes
        if n.alive
        and n.generation in wanted
        and n.gpus - used.get(n.node_id, 0) >= need
        and model.id not in replicas.get(n.node_id, [])
        and n.node_id not in avoid
    ]
    if not free:
        return None
    return min(free, key=lambda n: (len(replicas.get(n.node_id, [])), n.node_id)).node_id
