"""`neuraxis status`: the cluster as the controller sees it, as tables or JSON."""

from __future__ import annotations

import json
from typing import Any


def render(status: dict[str, Any]) -> str:
    """Tables of nodes, models with their replicas, and unplaceable models."""
    out: list[str] = []
    nodes = [
        [
            n["host"],
            n["generation"] or "-",
            str(n["gpus"]),
            "alive" if n["alive"] else "dead",
            n["node_id"][:12],
        ]
        for n in status["nodes"]
    ]
    out += _table("NODES", ["HOST", "GENERATION", "GPUS", "STATE", "NODE"], nodes)
    models = []
    replicas = []
    unplaceable = []
    for model in status["models"]:
        ready = sum(1 for r in model["replicas"] if r["state"] == "ready")
        gens = ",".join(model["generations"]) or "-"
        models.append(
            [model["id"], f"{ready}/{model['desired']}", gens, str(model["gpus_per_replica"])]
        )
        for r in model["replicas"]:
            in_flight = "-" if r["in_flight"] is None else str(r["in_flight"])
            state = r["state"] + (f" ({r['waiting']})" if r.get("waiting") else "")
            replicas.append(
                [
                    model["id"],
                    r["id"],
                    state,
                    r["address"] or "-",
                    r["generation"] or "-",
                    in_flight,
                ]
            )
        if model["unplaceable"]:
            unplaceable.append([model["id"], model["unplaceable"]])
        elif model.get("last_start_error") and ready < model["desired"]:
            unplaceable.append([model["id"], "failed to start: " + model["last_start_error"]])
    out += _table("MODELS", ["MODEL", "READY", "GENERATIONS", "GPUS/REPLICA"], models)
    out += _table(
        "REPLICAS",
        ["MODEL", "REPLICA", "STATE", "ADDRESS", "GENERATION", "IN-FLIGHT"],
        replicas,
    )
    if unplaceable:
        out += _table("UNPLACEABLE", ["MODEL", "REASON"], unplaceable)
    return "\n".join(out).rstrip() + "\n"


def render_json(status: dict[str, Any]) -> str:
    return json.dumps(status, indent=2, sort_keys=True) + "\n"


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
