"""cortex's settings (TOML file, NEURAXIS_CORTEX_* environment, flags)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "neuraxis"


class CortexSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NEURAXIS_CORTEX_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    # Static mode: the neurons' gRPC addresses (host:port).
    neurons: list[str] = Field(default_factory=list)
    # Models that must have a ready neuron for /readyz to pass. Empty: any
    # ready neuron will do.
    models: list[str] = Field(default_factory=list)
    # gRPC deadline for one generation, in seconds.
    request_timeout_s: float = Field(600.0, gt=0)
    # How often each neuron's Info is polled to learn readiness and models.
    poll_interval_s: float = Field(1.0, gt=0)
    # Attempts on other neurons when one fails before the first token.
    max_retries: int = Field(2, ge=0)
    # Largest accepted request body; larger ones get 413.
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # Request metrics at /metrics (off only to measure what they cost).
    metrics_enabled: bool = True
    # uvicorn worker processes; metrics are added up across them.
    workers: int = Field(1, ge=1, le=64)
    # Log lines as JSON objects (one per line), or as plain text.
    json_logs: bool = True
    # Where cortex keeps state: the Responses store (responses.sqlite3).
    state_dir: Path = Field(default_factory=default_state_dir)
    # A PostgreSQL DSN: keep stored responses there instead, shared by every
    # cortex instance that uses the same database.
    postgres_dsn: str | None = None

    # Cluster mode: the Ray cluster's address (host:port of the head's GCS).
    # cortex starts or finds the controller there and follows its endpoint
    # table instead of a static neuron list.
    ray_address: str | None = None
    # Cluster mode with the Ray head run by cortex itself (the head host's
    # service), on ray_port of ray_node_ip.
    ray_head: bool = False
    ray_port: int = Field(6379, ge=1, le=65535)
    ray_node_ip: str = "127.0.0.1"
    # The head's Ray ports fixed (6380-6384, 52365, workers 10002-10999), as
    # the firewalld service opens them; otherwise Ray picks free ones.
    ray_fixed_ports: bool = False
    # The deployment spec (TOML) the controller keeps true.
    deployment: Path | None = None
    # How often the controller checks replicas and the nodes.
    health_interval_s: float = Field(2.0, gt=0)
    # How long a replica may take to load its model before it counts as failed.
    replica_start_timeout_s: float = Field(900.0, gt=0)

    @field_validator("neurons")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"neuron address '{address}' is not host:port")
        return value

    @model_validator(mode="after")
    def _mode(self) -> CortexSettings:
        if self.cluster_mode:
            if self.deployment is None:
                raise ValueError("cluster mode (ray_address or ray_head) needs a deployment spec")
            if self.neurons:
                raise ValueError("give either neurons (static mode) or a Ray cluster, not both")
            if self.ray_head and self.ray_address:
                raise ValueError("give either ray_head (start one here) or ray_address, not both")
        return self

    @property
    def cluster_mode(self) -> bool:
        return self.ray_head or self.ray_address is not None
