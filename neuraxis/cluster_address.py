"""Which Ray cluster a cluster command (`neuraxis status`, `neuraxis node`)
talks to: --address, else cortex's settings file (--config), else
RAY_ADDRESS, else a running `neuraxis up` on this machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

from axon.settings import load_settings
from cortex.config import CortexSettings, default_state_dir

NO_ADDRESS = "give --address (the Ray head's host:port) or --config; no `neuraxis up` is running"


def cluster_address(address: str | None, config: Path | None) -> str | None:
    if address is None and config is not None:
        settings = load_settings(CortexSettings, config, {})
        ray = settings.ray
        head = f"{ray.node_ip}:{ray.port}" if ray.head else None
        address = ray.address or head
    return address or os.environ.get("RAY_ADDRESS") or _embedded_cluster()


def _embedded_cluster() -> str | None:
    """The address of a running `neuraxis up` (its token goes to the
    environment, for Ray to read)."""
    from neuraxis.embedded import EMBEDDED_CLUSTER_FILE

    marker = default_state_dir() / EMBEDDED_CLUSTER_FILE
    try:
        found = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = str(found["token"])
    return str(found["address"])
