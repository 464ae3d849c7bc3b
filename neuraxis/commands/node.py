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
import sys
import time
from pathlib import Path

MARKS = {"cordon": "cordoned", "drain": "draining", "uncordon": None}
POLL_S = 1.0
# A drain whose models say they cannot be placed for this long has nowhere
# to go (the controller reports it at once; a little slack for a pass).
STUCK_S = 10.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    node = sub.add_parser(
        "node",
        help="cordon, drain or uncordon a node",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    node_sub = node.add_subparsers(dest="node_command", required=True, metavar="COMMAND")
    helps = {
        "cordon": "no new replicas on the node; its replicas keep serving",
        "drain": "cordon, move the node's replicas elsewhere, wait until none is left",
        "uncordon": "let the node take replicas again",
    }
    for name, text in helps.items():
        command = node_sub.add_parser(name, help=text, description=text)
        command.add_argument("node", metavar="NODE", help="node id (or its prefix) or host")
        command.add_argument("--address", help="the Ray head's host:port (default: --config)")
        command.add_argument("--config", type=Path, help="cortex's TOML settings file")
        if name == "drain":
            command.add_argument(
                "--timeout",
                type=float,
                default=900.0,
                help="seconds to wait for the replicas to move (default 900)",
            )
    return node


def run(args: argparse.Namespace) -> int:
    from neuraxis.cluster_address import NO_ADDRESS, cluster_address

    address = cluster_address(args.address, args.config)
    if not address:
        print(NO_ADDRESS, file=sys.stderr)
        return 2
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
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
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
            print(
                f"neuraxis: {', '.join(blocked)} cannot move: no other node can hold "
                "them; their replicas keep serving on the node (add capacity or scale "
                "down, then drain again)",
                file=sys.stderr,
            )
            return 1
        if time.monotonic() - started > timeout_s:
            print(f"neuraxis: still on the node after {timeout_s:.0f} s", file=sys.stderr)
            return 1
        time.sleep(POLL_S)
