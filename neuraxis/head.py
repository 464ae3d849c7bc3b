"""`neuraxis head`: the Ray head as a service of its own (neuraxis-head.service).

The head holds the cluster's control state (its GCS) and hosts the
controller actor. Run apart from cortex it outlives cortex's restarts and
upgrades: cortex joins it as a client (`ray_address`) and never stops it,
so restarting the gateway reloads no replica. `neuraxis up` still starts
its own head for the embedded default (neuraxis/embedded.py).

The head runs as a child (`ray start --head --block`, its own process
group, dying with this process); this process tells systemd READY=1 once
the head's GCS accepts connections, and on SIGTERM stops the head's whole
process group. It does not drain the replicas first: a head that restarts
(with GCS fault tolerance) must leave them running.

GCS fault tolerance (`ray_gcs_storage = "redis://host:port"`): the head
keeps its control state in that Redis (Ray's RAY_REDIS_ADDRESS, under the
key prefix `ray_gcs_namespace`), so a head that restarts finds the cluster
as it was: the nodes rejoin, detached actors (the replicas) keep running.
Without it a head restart is a new, empty cluster (docs/deploy.md).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from axon.logs import LogSettings, configure_logging
from axon.process import stop_process_group
from axon.sdnotify import notify
from cortex.cluster.head import start_head, wait_for_head

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
    ray_gcs_storage: str | None = Field(
        None,
        description="GCS fault tolerance: redis://host:port of the Redis that keeps the "
        "head's control state across head restarts (off by default)",
    )
    ray_gcs_namespace: str = Field(
        "neuraxis",
        min_length=1,
        description="the key prefix of this cluster's state in that Redis (one per cluster)",
    )

    @field_validator("ray_gcs_storage")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None:
            redis_address(value)  # raises ValueError, which pydantic reports
        return value


def redis_address(url: str) -> str:
    """host:port of a redis://host:port URL (what Ray's RAY_REDIS_ADDRESS takes)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "redis" or not parts.hostname or port is None:
        raise ValueError(f"{url!r}: not redis://host:port")
    if parts.username or parts.password or parts.path.strip("/") or parts.query:
        raise ValueError(f"{url!r}: only redis://host:port (no password, database or options)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"


def head_env(settings: HeadSettings, base: dict[str, str]) -> dict[str, str]:
    """The head's environment: `base`, plus Ray's external GCS storage when
    `ray_gcs_storage` is set."""
    if settings.ray_gcs_storage is None:
        return dict(base)
    return {
        **base,
        "RAY_REDIS_ADDRESS": redis_address(settings.ray_gcs_storage),
        "RAY_external_storage_namespace": settings.ray_gcs_namespace,
    }


def run_head(settings: HeadSettings) -> int:
    """Start the head, tell systemd when it is up, and keep it until SIGTERM
    or Ctrl-C; exit with the head's status if it dies on its own."""
    configure_logging(settings.log_format, settings.log_level)
    address = f"{settings.ray_node_ip}:{settings.ray_port}"
    env = head_env(settings, dict(os.environ))
    head = start_head(
        settings.ray_port, settings.ray_node_ip, env=env, fixed_ports=settings.ray_fixed_ports
    )
    if settings.ray_gcs_storage is not None:
        log.info("GCS fault tolerance: the head's state is kept in %s", settings.ray_gcs_storage)
    else:
        log.info("GCS fault tolerance is off: a head restart starts an empty cluster")
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
