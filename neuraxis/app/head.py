"""`neuraxis head`: the Ray head as a service of its own (neuraxis-head.service).

The head holds the cluster's control state (its GCS) and hosts the
controller actor. Run apart from cortex it outlives cortex's restarts and
upgrades: cortex joins it as a client (`ray_address`) and never stops it,
so restarting the gateway reloads no replica. `neuraxis up` still starts
its own head for the embedded default (neuraxis/app/embedded.py).

The head runs as a child (`ray start --head --block`, its own process
group, dying with this process); this process tells systemd READY=1 once
the head's GCS accepts connections, and on SIGTERM stops the head's whole
process group. It does not drain the replicas first: a head that restarts
(with GCS fault tolerance) must leave them running.
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from cortex.cluster.head import start_head, wait_for_head
from neuraxis.core.logs import LogSettings, configure_logging
from neuraxis.core.process import stop_process_group
from neuraxis.core.sdnotify import notify

log = logging.getLogger("neuraxis.head")


class HeadSettings(LogSettings):
    """The head's settings: TOML keys of head.toml, NEURAXIS_HEAD_<NAME> and
    `neuraxis head --name-with-dashes`."""

    model_config = SettingsConfigDict(env_prefix="NEURAXIS_HEAD_", extra="forbid")

    ray_port: int = Field(6379, ge=1, le=65535, description="the Ray head's port (its GCS)")
    ray_node_ip: str = Field(
        "127.0.0.1", description="the address the other hosts reach this one at"
    )
    ray_fixed_ports: bool = Field(
        False,
        description="fixed Ray ports, as the firewalld service neuraxis-ray opens them",
    )
    start_timeout_s: float = Field(
        60.0, gt=0, description="how long the head may take to accept connections"
    )


def run_head(settings: HeadSettings) -> int:
    """Start the head, tell systemd when it is up, and keep it until SIGTERM
    or Ctrl-C; exit with the head's status if it dies on its own."""
    configure_logging(settings.log_format, settings.log_level)
    address = f"{settings.ray_node_ip}:{settings.ray_port}"
    head = start_head(settings.ray_port, settings.ray_node_ip, fixed_ports=settings.ray_fixed_ports)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        try:
            wait_for_head(address, head, settings.start_timeout_s)
        except RuntimeError as e:
            log.error("%s", e)
            return 1
        log.info("the Ray head is up at %s", address)
        notify("READY=1", f"STATUS=Ray head at {address}")
        code = head.wait()
        log.error("the Ray head exited with code %s", code)
        return code or 1
    except (KeyboardInterrupt, SystemExit):
        return 0
    finally:
        notify("STOPPING=1")
        stop_process_group(head, timeout_s=30)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    sys.exit(run_head(HeadSettings()))
