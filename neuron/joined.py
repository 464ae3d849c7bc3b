"""Whether this host has joined the Ray cluster: the agent's READY=1.

`ray start --block` returns no signal when its raylet has registered with
the GCS (its "Ray runtime started" line comes before that is certain), so
the agent finds the raylet among its child's process group (the raylet's
command line carries `--node_id=<hex>`) and asks the GCS whether that node
is alive. Both halves are small and separate: reading /proc (a root passed
in, so tests use a directory of their own) and the GCS query (Ray's own GCS
client, the one `ray start` uses; imported only when asked).

What does not live here: starting and supervising the child (neuron/agent.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("neuraxis.neuron")

_NODE_ID_FLAG = "--node_id="


def raylet_node_id(pgid: int, proc: Path = Path("/proc")) -> str | None:
    """The node id of the raylet running in process group `pgid`, or None
    while there is none (not started yet, or gone)."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold
            # spaces and parentheses, so split after its last ")".
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if not args or not args[0].endswith(b"raylet"):
            continue
        for arg in args:
            text = arg.decode(errors="replace")
            if text.startswith(_NODE_ID_FLAG):
                return text[len(_NODE_ID_FLAG) :]
    return None


def node_alive(gcs_address: str, node_id: str, timeout_s: float = 5.0) -> bool:
    """True when the GCS at `gcs_address` lists node `node_id` as alive.
    A GCS that does not answer counts as not yet (False), logged at debug."""
    # Ray's internal GCS client: the same call `ray start` and ray.init make
    # to find their node. Lazy: importing Ray costs a second.
    from ray._raylet import GcsClient, NodeID  # type: ignore[attr-defined]
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import (
        GetAllNodeInfoRequest,
    )

    try:
        client = GcsClient(address=gcs_address)
        nodes = client.get_all_node_info(
            timeout=timeout_s,
            node_selectors=[
                GetAllNodeInfoRequest.NodeSelector(node_id=NodeID.from_hex(node_id).binary())
            ],
            state_filter=GcsNodeInfo.GcsNodeState.ALIVE,
        )
    except Exception as e:  # Ray's RpcError, TimeoutError, a refused token alike
        log.debug("the GCS at %s did not answer: %s", gcs_address, e)
        return False
    return len(nodes) > 0
