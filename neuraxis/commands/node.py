"""`neuraxis node cordon|drain|uncordon NODE`: take a GPU host out of
placement to upgrade it, and put it back (cortex/cluster/nodes.py).

- cordon: no new replica goes to the node; its replicas keep serving;
- drain: cordon, then the controller moves the node's replicas (each
  replacement ready elsewhere before the old one stops); this command
  waits until none is left on the node (exit 0), or until --timeout, or
  until it is clear they cannot move (no capacity elsewhere: exit 1, the
  replicas keep running there);
- uncordon: the node takes replicas again.

NODE is a node id, a prefix of it as `neuraxis status` shows, or the
node's host when one node has it.
"""

from __future__ import annotations

import argparse
import time

from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_cluster_options,
    add_group,
    cluster_of,
    fail,
)

MARKS = {"cordon": "cordoned", "drain": "draining", "uncordon": None}
POLL_S = 1.0
# A drain whose models say they cannot be placed for this long has nowhere
# to go (the controller reports it at once; a little slack for a pass).
STUCK_S = 10.0


COMMANDS = {
    "cordon": Help("no new replicas on the node; its replicas keep serving"),
    "drain": Help("cordon, move the node's replicas elsewhere, wait until none is left"),
    "uncordon": Help("let the node take replicas again"),
}


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help(
        "cordon, drain or uncordon a node", __doc__.split("\n\n", 1)[1] if __doc__ else None
    )
    raw = argparse.RawDescriptionHelpFormatter
    node, commands = add_group(sub, "node", text, COMMANDS, formatter_class=raw)
    for command in commands.values():
        command.add_argument("node", metavar="NODE", help="node id (or its prefix) or host")
        add_cluster_options(command)
    commands["drain"].add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds to wait for the replicas to move (default 900)",
    )
    return node


def run(args: argparse.Namespace) -> int:
    address = cluster_of(args)
    # Imported once the address (and a running `up`'s token) is known.
    from cortex.cluster.client import ClusterError, connect, mark_node

    try:
        connect(address)
        node_id, host = mark_node(args.node, MARKS[args.node_command])
        said = {"cordon": "cordoned", "drain": "draining", "uncordon": "uncordoned"}
        print(f"neuraxis: node {node_id[:12]} ({host}) {said[args.node_command]}")
        if args.node_command == "drain":
            return _wait_drained(node_id, args.timeout)
    except ClusterError as e:
        return fail(e)
    return 0


def _wait_drained(node_id: str, timeout_s: float) -> int:
    from cortex.cluster.client import status

    started = time.monotonic()
    stuck_since: float | None = None
    last: list[str] | None = None
    while True:
        current = status()
        left = [
            f"{r.id} ({r.state.value})"
            for m in current.models
            for r in m.replicas
            if r.node_id == node_id
        ]
        if not left:
            print(f"neuraxis: node {node_id[:12]} drained in {time.monotonic() - started:.1f} s")
            return 0
        if left != last:
            print(f"neuraxis: on the node: {', '.join(left)}")
            last = left
        blocked = [m.id for m in current.models if m.unplaceable and any(
            r.node_id == node_id for r in m.replicas
        )]  # fmt: skip
        stuck_since = (stuck_since or time.monotonic()) if blocked else None
        if stuck_since is not None and time.monotonic() - stuck_since > STUCK_S:
            return fail(
                f"{', '.join(blocked)} cannot move: no other node can hold them; their "
                "replicas keep serving on the node (add capacity or scale down, then drain "
                "again)"
            )
        if time.monotonic() - started > timeout_s:
            return fail(f"still on the node after {timeout_s:.0f} s")
        time.sleep(POLL_S)
