"""cortex's settings (TOML file, NEURAXIS_CORTEX_* environment, flags) and
the default state directory.

`CortexSettings` holds what the process itself needs (listeners, neurons,
workers, TLS, logging) and nests one group per component: a component's
group is defined beside the code that uses it (`Deadlines` in
routing/deadlines.py, `RequestCaps` in api/caps.py, `AuthSettings` in
auth/settings.py, ...) and the component is given it as it is. The groups
defined here are those of the HTTP edge (http_guard.py, the body limit,
admin.py), the store and cluster mode ([ray], [controller]: importing
cortex.cluster sets Ray's environment, which a process reading its settings
must not get), whose modules take plain arguments.
docs/configuration.md lists them all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from axon.grpc_limits import MAX_MESSAGE_BYTES
from axon.logs import LogSettings
from axon.settings import Flag, SettingsGroup, SourcedSettings, group
from axon.tls import TlsFiles, check_plaintext, tls_files
from axon.tracing import TraceSettings
from cortex.api.batches.settings import BatchSettings, FilesSettings
from cortex.api.caps import RequestCaps
from cortex.api.responses.upkeep_settings import UpkeepSettings
from cortex.auth.settings import AuthSettings
from cortex.auth.tenancy_settings import TenancySettings
from cortex.routing.admission import AdmissionOptions
from cortex.routing.deadlines import Deadlines
from cortex.routing.ejection import EjectionOptions
from cortex.routing.factory import RoutingSettings
from cortex.routing.pool_settings import PoolSettings
from cortex.routing.retry_budget import RetryBudgetOptions

# `workers = "auto"` runs one worker per core, at most this many.
AUTO_WORKERS_CAP = 8


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "neuraxis"


class HttpSettings(SettingsGroup):
    """What a client connection may send (cortex/http_guard.py,
    middleware.BodyLimit)."""

    max_body_bytes: PositiveInt = Field(
        16 * 1024 * 1024,
        le=MAX_MESSAGE_BYTES // 2,
        description="largest accepted request body; larger ones get 413 (at most half of the "
        "gRPC message limit, which leaves room for a previous_response_id chain)",
    )
    header_timeout_s: PositiveFloat = Field(
        10.0,
        description="time a client has to send a request's line and headers, from connecting "
        "(or from the next request's first byte on a kept-alive connection); past it 408 "
        "request_timeout and the connection is closed (a connection that sent nothing is just "
        "closed): slow or idle clients cannot hold connections",
    )
    body_timeout_s: PositiveFloat = Field(
        60.0,
        description="time a client has to send a request's body once its headers are in; past "
        "it 408 request_timeout and the connection is closed (60 s: max_body_bytes at "
        "about 280 KB/s)",
    )
    send_timeout_s: PositiveFloat = Field(
        30.0,
        description="time a client may go without reading any of its answer while cortex "
        "has more to send; past it the connection is dropped with what was waiting for it "
        "(a client that never reads a large answer held it in memory for ever) and a stream "
        "is cancelled, freeing its engine slot (within the idle deadline, idle_timeout_s)",
    )
    max_header_count: PositiveInt = Field(
        100, description="most headers a request may have; past it 431 headers_too_large"
    )
    max_header_bytes: PositiveInt = Field(
        16 * 1024,
        description="largest request line and headers together, in bytes; past it 431 "
        "headers_too_large",
    )


class AdminSettings(SettingsGroup):
    """The admin listener (cortex/admin.py), what only operators
    and Prometheus should reach, apart from the API clients' port."""

    host: str = Field(
        "127.0.0.1",
        description="admin listener's address (/metrics, /sd/neurons): loopback, so that "
        "only this host (its Prometheus) reads metrics and neuron addresses",
    )
    port: NonNegativeInt = Field(
        9180,
        le=65535,
        description="admin listener's port (0: a free one, logged at start). 9180: fixed, so "
        "that a scrape target keeps its instance label across restarts, in Prometheus's "
        "exporter range and clear of its own 9090-9093, the neurons' metrics ports "
        "(9400-9449) and Ray's",
    )


class StoreSettings(SettingsGroup):
    """Where stored responses, API keys and usage are kept."""

    state_dir: Path = Field(
        default_factory=default_state_dir,
        description="where cortex keeps state, the Responses store (default "
        "$XDG_STATE_HOME/neuraxis or ~/.local/state/neuraxis)",
    )
    postgres_dsn: str | None = Field(
        None,
        description="keep stored responses in this PostgreSQL database instead, shared by "
        "every cortex instance that uses it",
    )


class RaySettings(SettingsGroup):
    """Cluster mode's Ray cluster: join one, or run its head here."""

    address: str | None = Field(
        None, description="cluster mode: the Ray head's address (host:port of its GCS)"
    )
    head: bool = Field(
        False,
        description="cluster mode: run the Ray head here (the head host's service), on "
        "[ray] port of node_ip",
    )
    port: int = Field(6379, ge=1, le=65535, description="the Ray head's port")
    node_ip: str = Field("127.0.0.1", description="the address the Ray head listens on")
    fixed_ports: bool = Field(
        False,
        description="fix the head's Ray ports (6380-6384, 52365, workers 10002-10999), as the "
        "firewalld service opens them; otherwise Ray picks free ones",
    )


class ControllerSettings(SettingsGroup):
    """Cluster mode's controller, which keeps the deployment
    spec true (cortex/cluster/)."""

    deployment: Path | None = Field(
        None, description="cluster mode: the deployment spec (TOML) the controller keeps true"
    )
    health_interval_s: PositiveFloat = Field(
        2.0, description="how often the controller checks replicas and nodes (s)"
    )
    replica_start_timeout_s: PositiveFloat = Field(
        900.0,
        description="how long a replica may take to load its model before it counts as failed (s)",
    )
    wake_timeout_s: float | None = Field(
        None,
        gt=0,
        description="how long a request for a model scaled to zero waits for a replica to "
        "load before it gets 503 with Retry-After (s); unset: twice the model's last "
        "measured load time, at least 60 s (replica_start_timeout_s before any load)",
    )


class CortexSettings(SourcedSettings, LogSettings, TraceSettings):
    """Each plain field is a setting everywhere: TOML key, NEURAXIS_CORTEX_<NAME>
    and `neuraxis cortex --name-with-dashes` (neuraxis/options.py; `Flag`
    where the option is spelled otherwise), with its description as the help.
    Each group field is a TOML table, NEURAXIS_CORTEX_<GROUP>__<NAME> and
    `--group-name`. Adding a setting is adding a field, in its component's group."""

    model_config = SettingsConfigDict(
        env_prefix="NEURAXIS_CORTEX_", env_nested_delimiter="__", extra="forbid"
    )

    host: str = Field("127.0.0.1", description="HTTP listen address")
    port: NonNegativeInt = Field(8080, le=65535, description="HTTP port")
    neurons: Annotated[list[str], Flag("neuron", metavar="HOST:PORT")] = Field(
        default_factory=list,
        description="static mode: a neuron's gRPC address (repeatable)",
    )
    models: Annotated[list[str], Flag("model", metavar="ID")] = Field(
        default_factory=list,
        description="a model that must have a ready neuron for /readyz (repeatable; "
        "default: any ready neuron will do)",
    )
    # The flag predates the field: --no-metrics (and so --metrics).
    metrics_enabled: Annotated[bool, Flag("metrics")] = Field(
        True, description="request metrics at /metrics (off only to measure what they cost)"
    )
    metrics_tenant_label: bool = Field(
        False,
        description="also count each tenant's prompt, cached and output tokens at /metrics "
        "(neuraxis_tenant_tokens_total, a label per tenant: off by default to bound the series; "
        "the usage ledger has the same figures)",
    )
    workers: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = Field(
        1,
        description="uvicorn worker processes, or auto: one per core, at most "
        f"{AUTO_WORKERS_CAP}; metrics are added up across them",
    )
    shutdown_grace_s: PositiveFloat = Field(
        30.0,
        description="seconds in-flight requests get to finish when cortex stops; streams "
        "still open near the end are ended with their terminal events",
    )
    # Mutual TLS to the neurons (all three or none). docs/deploy.md, "Mutual TLS".
    # Plain fields, as the neuron's: `tls` below is what both sides read.
    tls_ca: Path | None = Field(
        None, description="mutual TLS: the CA certificate neurons' certificates must chain to"
    )
    tls_cert: Path | None = Field(
        None, description="mutual TLS: cortex's client certificate (PEM, signed by tls_ca)"
    )
    tls_key: Path | None = Field(None, description="mutual TLS: tls_cert's private key (PEM)")
    plaintext: bool = Field(
        False,
        description="gRPC to the neurons without TLS, on purpose (refused beside tls_*), with "
        "a warning at every start; without TLS or this, cortex refuses to start unless every "
        "neuron (static mode) or the Ray cluster is on a loopback address",
    )

    admin: AdminSettings = group(AdminSettings, "admin listener")
    http: HttpSettings = group(HttpSettings, "client connections")
    caps: RequestCaps = group(RequestCaps, "request caps")
    admission: AdmissionOptions = group(AdmissionOptions, "admission control")
    routing: RoutingSettings = group(RoutingSettings, "routing")
    pool: PoolSettings = group(PoolSettings, "the neuron pool")
    deadlines: Deadlines = group(Deadlines, "request deadlines")
    retry_budget: RetryBudgetOptions = group(RetryBudgetOptions, "the retry budget")
    ejection: EjectionOptions = group(EjectionOptions, "outlier ejection")
    auth: AuthSettings = group(AuthSettings, "API keys")
    tenancy: TenancySettings = group(TenancySettings, "tenants and the usage ledger")
    store: StoreSettings = group(StoreSettings, "the store")
    responses: UpkeepSettings = group(UpkeepSettings, "stored responses' upkeep")
    files: FilesSettings = group(FilesSettings, "the Files API")
    batches: BatchSettings = group(BatchSettings, "the Batch API")
    ray: RaySettings = group(RaySettings, "cluster mode: Ray")
    controller: ControllerSettings = group(ControllerSettings, "cluster mode: the controller")

    # The top-level spellings every grouped setting had before round 3: TOML
    # keys, NEURAXIS_CORTEX_<OLD> and --old-name still set it (and `neuraxis
    # config check` names the new one). Frozen: a new setting needs no entry.
    former_names: ClassVar[dict[str, str]] = {
        "admin_host": "admin.host",
        "admin_port": "admin.port",
        "max_body_bytes": "http.max_body_bytes",
        "request_header_timeout_s": "http.header_timeout_s",
        "request_body_timeout_s": "http.body_timeout_s",
        "max_header_count": "http.max_header_count",
        "max_header_bytes": "http.max_header_bytes",
        **{name: f"caps.{name}" for name in RequestCaps.model_fields},
        "replica_max_concurrency": "admission.replica_max_concurrency",
        "admission_queue_size": "admission.queue_size",
        "admission_queue_timeout_s": "admission.queue_timeout_s",
        "routing": "routing.policy",
        "routing_models": "routing.models",
        "routing_epsilon": "routing.epsilon",
        "routing_block_bytes": "routing.block_bytes",
        "routing_max_blocks": "routing.max_blocks",
        "load_max_age_s": "routing.load_max_age_s",
        "routing_kv_limit": "routing.kv_limit",
        "poll_interval_s": "pool.poll_interval_s",
        "health_timeout_s": "pool.health_timeout_s",
        "load_interval_s": "pool.load_interval_s",
        "max_retries": "pool.max_retries",
        "first_token_timeout_s": "deadlines.first_token_s",
        "idle_timeout_s": "deadlines.idle_s",
        "request_timeout_s": "deadlines.total_s",
        "retry_budget_ratio": "retry_budget.ratio",
        "retry_budget_min": "retry_budget.minimum",
        "eject_consecutive_failures": "ejection.consecutive_failures",
        "eject_base_s": "ejection.base_s",
        "eject_max_s": "ejection.max_s",
        "auth": "auth.mode",
        "allow_unauthenticated": "auth.allow_unauthenticated",
        "rate_limit_counters": "auth.rate_limit_counters",
        "auth_cache_s": "auth.cache_s",
        "state_dir": "store.state_dir",
        "postgres_dsn": "store.postgres_dsn",
        "responses_ttl_days": "responses.ttl_days",
        "responses_purge_interval_s": "responses.purge_interval_s",
        "responses_lease_s": "responses.lease_s",
        "ray_address": "ray.address",
        "ray_head": "ray.head",
        "ray_port": "ray.port",
        "ray_node_ip": "ray.node_ip",
        "ray_fixed_ports": "ray.fixed_ports",
        "deployment": "controller.deployment",
        "health_interval_s": "controller.health_interval_s",
        "replica_start_timeout_s": "controller.replica_start_timeout_s",
    }

    @field_validator("neurons")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"neuron address '{address}' is not host:port")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> CortexSettings:
        """What no one field can check alone (the first that fails is the error)."""
        if self.admin.port and self.admin.port == self.port:
            raise ValueError(f"the admin port and port are both {self.port}: give them two ports")
        if self.cluster_mode:
            if self.controller.deployment is None:
                raise ValueError("cluster mode ([ray] address or head) needs a deployment spec")
            if self.neurons:
                raise ValueError("give either neurons (static mode) or a Ray cluster, not both")
            if self.ray.head and self.ray.address:
                raise ValueError("give either [ray] head (start one here) or address, not both")
        check_plaintext(tls_files(self.tls_ca, self.tls_cert, self.tls_key), self.plaintext)
        return self

    @property
    def tls(self) -> TlsFiles | None:
        """The mutual-TLS files, or None: plaintext gRPC."""
        return tls_files(self.tls_ca, self.tls_cert, self.tls_key)

    @property
    def neuron_hosts(self) -> list[str]:
        """The hosts cortex's gRPC goes to: the static neurons', or in
        cluster mode the Ray cluster's (its head's address: a loopback head
        has its replicas on this host)."""
        if self.ray.address is not None:
            return [self.ray.address.rpartition(":")[0]]
        if self.ray.head:
            return [self.ray.node_ip]
        return [address.rpartition(":")[0] for address in self.neurons]

    @property
    def worker_count(self) -> int:
        """How many workers serve: `workers`, or for auto one per core up to
        AUTO_WORKERS_CAP (past that, more processes only contend for the
        same store and neurons while each costs its own memory)."""
        if self.workers == "auto":
            return max(1, min(os.cpu_count() or 1, AUTO_WORKERS_CAP))
        return self.workers

    @property
    def cluster_mode(self) -> bool:
        return self.ray.head or self.ray.address is not None

    @property
    def local_rate_limit_counters(self) -> bool:
        """Whether this process may keep the rate-limit counters to itself."""
        if self.auth.rate_limit_counters == "auto":
            return self.worker_count == 1 and not self.store.postgres_dsn
        return self.auth.rate_limit_counters == "local"
