"""`neuraxis status`: the cluster as the controller sees it, as tables or
JSON, once or refreshed (`--watch`). The status itself (typed, with its JSON
form) is cortex/cluster/status.py; this module only renders it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TextIO

from cortex.cluster.status import ClusterStatus, ReplicaState

# A model with more adapters than this shows their count, not their ids.
MAX_ADAPTER_IDS = 3


def render(status: ClusterStatus) -> str:
    """Tables of nodes, models with their replicas, and unplaceable models."""
    out: list[str] = []
    nodes = [
        [
            n.host,
            n.generation.value if n.generation else "-",
            str(n.gpus),
            ("alive" if n.alive else "dead") + (f", {n.mark}" if n.mark else ""),
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
        models.append(
            [
                model.id,
                f"{ready}/{model.desired}",
                gens,
                str(model.gpus_per_replica),
                _adapters(model.adapters),
            ]
        )
        for r in model.replicas:
            state = r.state.value + (f" ({r.waiting})" if r.waiting else "")
            generation = r.generation.value if r.generation else "-"
            age = "-" if r.load_age_s is None else f"{r.load_age_s:.1f}s"
            replicas.append(
                [
                    model.id,
                    r.id,
                    state,
                    r.address or "-",
                    generation,
                    _count(r.cortex_in_flight),
                    _count(r.engine_running),
                    _count(r.engine_waiting),
                    age,
                ]
            )
        if model.unplaceable:
            unplaceable.append([model.id, model.unplaceable])
        elif model.last_start_error and ready < model.desired:
            unplaceable.append([model.id, "failed to start: " + model.last_start_error])
    out += _table("MODELS", ["MODEL", "READY", "GENERATIONS", "GPUS/REPLICA", "ADAPTERS"], models)
    # IN-FLIGHT is what the cortex instances have sent and not yet seen end;
    # RUNNING and WAITING are the engine's own counts, AGE how old they are.
    out += _table(
        "REPLICAS",
        [
            "MODEL",
            "REPLICA",
            "STATE",
            "ADDRESS",
            "GENERATION",
            "IN-FLIGHT",
            "RUNNING",
            "WAITING",
            "AGE",
        ],
        replicas,
    )
    if unplaceable:
        out += _table("UNPLACEABLE", ["MODEL", "REASON"], unplaceable)
    out += _autoscaling(status)
    cortices = [
        [c.instance, str(c.in_flight), str(c.table_version), f"{c.reported_s_ago:.1f}s ago"]
        for c in status.cortices
    ]
    out += _control_plane(status)
    out += _table("CORTEX", ["INSTANCE", "IN-FLIGHT", "TABLE", "REPORTED"], cortices)
    return "\n".join(out).rstrip() + "\n"


def _autoscaling(status: ClusterStatus) -> list[str]:
    """The autoscaled models (none: no table): ready/desired, the bounds,
    and the last change of the desired count with its reason and figures."""
    rows = []
    for model in status.models:
        scale = model.autoscale
        if scale is None:
            continue
        ready = sum(1 for r in model.replicas if r.state is ReplicaState.READY)
        last = "-"
        if scale.direction is not None:
            last = f"{scale.direction} ({scale.reason}) {scale.decided_s_ago:.0f}s ago"
        rows.append(
            [
                model.id,
                f"{ready}/{model.desired}",
                f"{scale.min_replicas}-{scale.max_replicas}",
                last,
                scale.detail or "-",
            ]
        )
    if not rows:
        return []
    return _table("AUTOSCALING", ["MODEL", "READY/DESIRED", "MIN-MAX", "LAST", "WHY"], rows)


def _control_plane(status: ClusterStatus) -> list[str]:
    """The controller (its epoch, the replicas it adopted when it started)
    and, per cortex, what it sees of the head and the controller: the head
    answering, its table's age (since the controller last confirmed it), the
    controllers that replaced the one it followed and what they adopted."""
    epoch = (status.epoch or "-")[:8]
    out = _table(
        "CONTROLLER",
        ["EPOCH", "TABLE", "ADOPTED"],
        [[epoch, str(status.version), str(status.adopted)]],
    )
    rows = [
        [
            c.instance,
            "-" if c.head_up is None else ("up" if c.head_up else "DOWN"),
            "-" if c.table_age_s is None else f"{c.table_age_s:.1f}s",
            str(c.controller_restarts),
            str(c.adopted),
        ]
        for c in status.cortices
    ]
    header = ["INSTANCE", "HEAD", "TABLE-AGE", "CONTROLLER-RESTARTS", "ADOPTED"]
    return out + _table("CONTROL PLANE (as each cortex sees it)", header, rows)


def watch(
    fetch: Callable[[], ClusterStatus],
    out: TextIO,
    interval_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
    rounds: int | None = None,
) -> None:
    """Print the status every `interval_s` until interrupted (or `rounds`
    times), each time over the last one when `out` is a terminal."""
    done = 0
    while rounds is None or done < rounds:
        text = render(fetch())
        stamp = time.strftime("%H:%M:%S", time.localtime(now()))
        header = f"neuraxis status, every {interval_s:g}s ({stamp}; Ctrl-C to stop)\n\n"
        # Home and clear-screen on a terminal; a plain separator in a file.
        lead = "\x1b[H\x1b[2J" if out.isatty() else ("\n" if done else "")
        out.write(lead + header + text)
        out.flush()
        done += 1
        if rounds is None or done < rounds:
            sleep(interval_s)


def _adapters(ids: list[str]) -> str:
    """A model's adapters: their ids when few, else how many (`neuraxis
    adapters list` names them all); "-" for none."""
    if not ids:
        return "-"
    if len(ids) <= MAX_ADAPTER_IDS:
        return ",".join(ids)
    return str(len(ids))


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_json(status: ClusterStatus) -> str:
    return json.dumps(status.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


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
