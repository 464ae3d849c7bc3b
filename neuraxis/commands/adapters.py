"""`neuraxis adapters add MODEL ID SOURCE | remove ID | list`: a cluster's
LoRA adapters changed at run time, through the controller
(cortex/cluster/controller_adapters.py).

- add: the source (a directory in PEFT's format, on every host that runs
  MODEL or on shared storage) is checked first: its adapter_config.json,
  a rank within the model's max_rank, the model it was trained on; an
  unknown model, one without [models.lora] or an id already taken is
  refused too, before any replica is touched. Then every ready replica of
  MODEL serves ID, and so do the replicas started later;
- remove: the adapter is served no more; each replica unloads it once its
  requests there have ended;
- list: each adapter, its model, the ready replicas serving it and those
  whose engines hold it now.

The changes outlive the controller and cortex restarts; they are laid over
the deployment spec, whose own [[models.adapters]] entries win.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_cluster_options,
    add_group,
    cluster_of,
    fail,
)

COMMANDS = {
    "add": Help(
        "serve a LoRA adapter of a model on the cluster",
        "Check the adapter's directory, then have every ready replica of MODEL serve it as "
        "ID (and the replicas started later). Nothing changes when it is refused.",
    ),
    "remove": Help(
        "serve an adapter no more",
        "Take the adapter out of the cluster's spec and off every replica; its requests in "
        "flight finish first.",
    ),
    "list": Help("list the adapters and the replicas holding each"),
}


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help(
        "add, remove or list the cluster's LoRA adapters",
        __doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    raw = argparse.RawDescriptionHelpFormatter
    group, commands = add_group(sub, "adapters", text, COMMANDS, formatter_class=raw)
    add = commands["add"]
    add.add_argument("model", metavar="MODEL", help="the base model's id, as in the spec")
    add.add_argument("id", metavar="ID", help="the id clients will ask for")
    add.add_argument(
        "source",
        metavar="SOURCE",
        type=Path,
        help="the adapter's directory (adapter_config.json and weights), the same path on "
        "every host of the model; a relative path is made absolute here",
    )
    commands["remove"].add_argument("id", metavar="ID", help="the adapter's id")
    commands["list"].add_argument("--json", action="store_true", help="print JSON")
    for command in commands.values():
        add_cluster_options(command)
    return group


def run(args: argparse.Namespace) -> int:
    from axon.errors import NeuraxisError

    address = cluster_of(args)
    # Imported once the address (and a running `up`'s token) is known.
    from cortex.cluster.client import (
        ClusterError,
        add_adapter,
        connect,
        list_adapters,
        remove_adapter,
    )

    try:
        connect(address)
        if args.adapters_command == "add":
            source = str(args.source.expanduser().absolute())
            done = add_adapter(args.model, args.id, source)
            print(f"neuraxis: adapter {args.id} of {args.model} added: {_told(done)}")
        elif args.adapters_command == "remove":
            done = remove_adapter(args.id)
            print(f"neuraxis: adapter {args.id} of {done['model']} removed: {_told(done)}")
        else:
            listed = list_adapters()
            as_json = json.dumps(listed, indent=2, sort_keys=True) + "\n"
            sys.stdout.write(as_json if args.json else render(listed))
    except (ClusterError, NeuraxisError) as e:
        return fail(e)
    return 0


def _told(done: dict[str, Any]) -> str:
    """Which replicas were told now, and which a later pass will tell."""
    told = ", ".join(done["replicas"]) or "no ready replica"
    pending = "".join(f"; {r} later ({why})" for r, why in sorted(done["pending"].items()))
    return f"{told}{pending}"


def render(listed: dict[str, Any]) -> str:
    """The adapters as a table, as `neuraxis status` prints its own."""
    header = ["ADAPTER", "MODEL", "ADDED", "SERVED BY", "HELD BY", "SOURCE"]
    rows = [
        [
            a["id"],
            a["model"],
            "run time" if a["added_at_run_time"] else "spec",
            ",".join(a["replicas"]) or "-",
            ",".join(a["held_by"]) or "-",
            a["source"],
        ]
        for a in listed["adapters"]
    ]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if not rows:
        lines.append("(no adapters)")
    if listed["unreachable"]:
        lines.append(f"not answering (not counted): {', '.join(listed['unreachable'])}")
    return "\n".join(lines) + "\n"
