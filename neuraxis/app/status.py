"""`neuraxis status`: the cluster as the controller sees it, as tables or
JSON. The status itself (typed, with its JSON form) is
cortex/cluster/status.py; this module only renders it."""

from __future__ import annotations

import json

from cortex.cluster.status import ClusterStatus, ReplicaState


def render(status: ClusterStatus) -> str:
    """Tables of nodes, models with their replicas, and unplaceable models."""
    out: list[str] = []
    nodes = [
        [
            n.host,
            n.generation.value if n.generation else "-",
            str(n.gpus),
            "alive" if n.alive else "dead",
            n.node_id[:12],
        ]
        for n in status.nodes
    ]
    out += _table("NODES", ["HOST", "GENERATION", "GPUS", "STATE", "NODE"], nodes)
    models = []
    replicas = []
    unplaceable = []
    for model in status.models:
        ready = sum(1 for r in model.replicas if r.state is ReplicaState.READY)
        gens = ",".join(g.value for g in model.generations) or "-"
        models.append([model.id, f"{ready}/{model.desired}", gens, str(model.gpus_per_replica)])
        for r in model.replicas:
            in_flight = "-" if r.in_flight is None else str(r.in_flight)
            state = r.state.value + (f" ({r.waiting})" if r.waiting else "")
            generation = r.generation.value if r.generation else "-"
            replicas.append([model.id, r.id, state, r.address or "-", generation, in_flight])
        if model.unplaceable:
            unplaceable.append([model.id, model.unplaceable])
        elif model.last_start_error and ready < model.desired:
            unplaceable.append([model.id, "failed to start: " + model.last_start_error])
    out += _table("MODELS", ["MODEL", "READY", "GENERATIONS", "GPUS/REPLICA"], models)
    out += _table(
        "REPLICAS",
        ["MODEL", "REPLICA", "STATE", "ADDRESS", "GENERATION", "IN-FLIGHT"],
        replicas,
    )
    if unplaceable:
        out += _table("UNPLACEABLE", ["MODEL", "REASON"], unplaceable)
    return "\n".join(out).rstrip() + "\n"


def render_json(status: ClusterStatus) -> str:
    return json.dumps(status.to_dict(), indent=2, sort_keys=True) + "\n"


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [title]
    for row in [header, *rows]:
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )
    if not rows:
        lines.append("  (none)")
    return [*lines, ""]
