"""cortex's settings (TOML file, NEURAXIS_CORTEX_* environment, flags)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator
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

    @field_validator("neurons")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"neuron address '{address}' is not host:port")
        return value
