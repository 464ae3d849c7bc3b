"""`neuraxis cortex`: serve the gateway with uvicorn, in one process or in
several workers whose metrics are added up (prometheus_client's
multiprocess mode)."""

from __future__ import annotations

import os
import signal
import tempfile
from types import FrameType
from typing import Any

import uvicorn

from cortex.config import CortexSettings
from neuraxis.core.logs import configure_logging

_SETTINGS_ENV = "NEURAXIS_CORTEX_SETTINGS_JSON"


def run(settings: CortexSettings) -> int:
    configure_logging(settings.json_logs)
    if not settings.ray_head:
        return _serve(settings)
    # The head host's service: a Ray head beside cortex, stopped with it.
    from cortex.cluster.head import start_head, wait_for_head
    from neuraxis.core.process import stop_process_group

    address = f"{settings.ray_node_ip}:{settings.ray_port}"
    head = start_head(settings.ray_port, settings.ray_node_ip, fixed_ports=settings.ray_fixed_ports)
    # uvicorn re-raises the SIGTERM it shut down for once it has restored the
    # previous handler: with this one, that unwinds to the `finally` below
    # instead of killing the process before it stops the head.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        wait_for_head(address, head)
        return _serve(settings.model_copy(update={"ray_head": False, "ray_address": address}))
    finally:
        if head.poll() is None:
            # The cluster ends with its head: the replicas drain first.
            from cortex.cluster.client import drain_cluster

            drain_cluster(address)
        stop_process_group(head, timeout_s=30)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _serve(settings: CortexSettings) -> int:
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": "httptools",
        "log_level": "warning",
        # Give in-flight streams time to finish on SIGTERM.
        "timeout_graceful_shutdown": 30,
    }
    if settings.workers > 1:
        # Must be set before any worker imports prometheus_client's metrics.
        os.environ.setdefault(
            "PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="neuraxis-metrics-")
        )
        os.environ[_SETTINGS_ENV] = settings.model_dump_json()
        uvicorn.run("cortex.main:app_from_env", factory=True, workers=settings.workers, **options)
        return 0
    from cortex.app import create_app

    uvicorn.run(create_app(settings), **options)
    return 0


def app_from_env() -> Any:
    """The app factory each worker process calls."""
    from cortex.app import create_app

    settings = CortexSettings.model_validate_json(os.environ[_SETTINGS_ENV])
    configure_logging(settings.json_logs)
    return create_app(settings)
