"""Node operations (`neuraxis node cordon|drain|uncordon NODE`): what the
controller records of a node an operator has taken out of placement.

- cordoned: no new replica goes there; the replicas on it keep serving;
- draining: cordoned, and its replicas move: for each, a replacement is
  placed on another node first and, once enough replicas elsewhere are
  ready, the one on the draining node is drained and stopped, so that a
  model never has fewer ready replicas than before while capacity exists
  elsewhere. Where none exists, the replica stays and the model shows why.

The marks are kept in the cluster (ray_backend: Ray's internal key-value
store, in the GCS) so that a controller that restarts keeps them.
"""

from __future__ import annotations

from enum import StrEnum

from cortex.cluster.placement import NodeView


class NodeMark(StrEnum):
    CORDONED = "cordoned"
    DRAINING = "draining"


class NodeError(ValueError):
    """A node operation that cannot be done; the message says why."""


def resolve(nodes: list[NodeView], name: str) -> NodeView:
    """The node `name` means: its id, a prefix of it (as `neuraxis status`
    shows it), or its host when one node has that host."""
    exact = [n for n in nodes if n.node_id == name]
    if exact:
        return exact[0]
    by_prefix = [n for n in nodes if len(name) >= 6 and n.node_id.startswith(name)]
    by_host = [n for n in nodes if n.host == name]
    found = by_prefix or by_host
    if len(found) == 1:
        return found[0]
    if not found:
        known = ", ".join(f"{n.node_id[:12]} ({n.host})" for n in nodes) or "none"
        raise NodeError(f"no node {name!r} in the cluster (nodes: {known})")
    ids = ", ".join(n.node_id[:12] for n in found)
    raise NodeError(f"{name!r} matches several nodes ({ids}): give the node id")
