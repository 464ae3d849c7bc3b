"""cortex's settings (TOML file, NEURAXIS_CORTEX_* environment, flags) and
the default state directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from cortex.api.caps import RequestCaps
from cortex.routing.admission import AdmissionOptions
from cortex.routing.deadlines import Deadlines
from cortex.routing.ejection import EjectionOptions
from cortex.routing.factory import DEFAULT_POLICY, PolicyName, PolicyOptions, PolicyTable
from cortex.routing.retry_budget import RetryBudgetOptions
from neuraxis.core.grpc_limits import MAX_MESSAGE_BYTES
from neuraxis.core.logs import LogSettings
from neuraxis.core.settings import Flag
from neuraxis.core.tls import TlsFiles, tls_files


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "neuraxis"


class CortexSettings(LogSettings):
    """Each field is one setting everywhere: TOML key, NEURAXIS_CORTEX_<NAME>
    and `neuraxis cortex --name-with-dashes` (neuraxis/app/options.py; `Flag`
    where the option is spelled otherwise), with its description as the help.
    Adding a setting is adding a field."""

    model_config = SettingsConfigDict(env_prefix="NEURAXIS_CORTEX_", extra="forbid")

    host: str = Field("127.0.0.1", description="HTTP listen address")
    port: int = Field(8080, ge=0, le=65535, description="HTTP port")
    # The admin listener (cortex/admin.py): what only operators and Prometheus
    # should reach, apart from the API clients' port.
    admin_host: str = Field(
        "127.0.0.1",
        description="admin listener's address (/metrics, /sd/neurons): loopback, so that "
        "only this host (its Prometheus) reads metrics and neuron addresses",
    )
    admin_port: int = Field(
        9180,
        ge=0,
        le=65535,
        description="admin listener's port (0: a free one, logged at start). 9180: fixed, so "
        "that a scrape target keeps its instance label across restarts, in Prometheus's "
        "exporter range and clear of its own 9090-9093, the neurons' metrics ports "
        "(9400-9449) and Ray's",
    )
    neurons: Annotated[list[str], Flag("neuron", metavar="HOST:PORT")] = Field(
        default_factory=list,
        description="static mode: a neuron's gRPC address (repeatable)",
    )
    models: Annotated[list[str], Flag("model", metavar="ID")] = Field(
        default_factory=list,
        description="a model that must have a ready neuron for /readyz (repeatable; "
        "default: any ready neuron will do)",
    )
    request_timeout_s: float = Field(
        600.0,
        gt=0,
        description="total deadline of one generation, retries included (a retry keeps the "
        "original deadline), in seconds",
    )
    first_token_timeout_s: float = Field(
        120.0,
        gt=0,
        description="deadline for a neuron's first message of an attempt, queueing included; "
        "past it the attempt fails and, nothing having been sent, is retried elsewhere (s)",
    )
    idle_timeout_s: float = Field(
        60.0,
        gt=0,
        description="deadline between two messages of a stream once it has started (long "
        "enough for output held back, e.g. a tool call's arguments); past it the stream ends "
        "with its terminal error event (s)",
    )
    health_timeout_s: float = Field(
        1.0,
        gt=0,
        description="how long a neuron's Info poll may take before the neuron counts as not "
        "answering: out of rotation, and its requests in flight abandoned (s)",
    )
    eject_consecutive_failures: int = Field(
        5,
        ge=1,
        description="outlier ejection: failures in a row (INTERNAL, UNAVAILABLE, deadline, "
        "broken stream; never the request's own errors) that eject a neuron (Envoy's 5)",
    )
    eject_base_s: float = Field(
        30.0,
        gt=0,
        description="outlier ejection: a neuron is ejected for this x the times it has been "
        "ejected, then comes back on probation: one success clears it, one failure ejects "
        "it again; the last ready replica of a model is never ejected (s, Envoy's 30)",
    )
    eject_max_s: float = Field(
        300.0, gt=0, description="outlier ejection: the longest ejection (s, Envoy's 300)"
    )
    retry_budget_ratio: float = Field(
        0.2,
        ge=0,
        le=1,
        description="at most this share of the requests in flight may be retrying at once "
        "(a request during which an engine died is retried at most once)",
    )
    retry_budget_min: int = Field(
        3, ge=0, description="retries allowed at once however few requests are in flight"
    )
    poll_interval_s: float = Field(
        1.0,
        gt=0,
        description="how often each neuron's Info is polled for readiness and models (s)",
    )
    max_retries: int = Field(
        2, ge=0, description="attempts on other neurons when one fails before the first token"
    )
    routing: PolicyName = Field(
        DEFAULT_POLICY,
        description="how a neuron is chosen for a request: least_outstanding, power_of_two "
        "(the less loaded of two random neurons) or prefix_affinity (where the prompt's "
        "prefix is likely cached, under a load bound)",
    )
    routing_models: dict[str, PolicyName] = Field(
        default_factory=dict,
        description="a routing policy per model, overriding routing and the deployment "
        'spec\'s per-model routing: {"model-id": "power_of_two"}',
    )
    routing_epsilon: float = Field(
        0.5,
        ge=0,
        description="prefix_affinity: no neuron takes more than (1 + epsilon) x the average load. "
        "0.5 from make bench-routing-sim (16 replicas, 64 prompt groups, overflow keeping the "
        "prefix homed, 0.25/0.5/1.0 alternating in one run): groups TTFT p50 47 ms (0.25: 66, "
        "1.0: 65), p90 363 ms (510, 426), output tokens/s 649 (542, 608), replica shares within "
        "1.06x the average (1.09x, 1.23x); one hot prefix's TTFT p90 129 ms (106, 95) against "
        "least_outstanding's 114, within run-to-run noise at that load (the home's bound is 3 "
        "requests for both 0.25 and 0.5 there)",
    )
    routing_block_bytes: int = Field(
        256, gt=0, description="prefix_affinity: size of one hashed block of the prompt prefix"
    )
    routing_max_blocks: int = Field(
        32, gt=0, description="prefix_affinity: how many prefix blocks are hashed per request"
    )
    load_interval_s: float = Field(
        0.5, gt=0, description="how often each ready neuron's engine load is polled (s)"
    )
    load_max_age_s: float = Field(
        2.0,
        gt=0,
        description="an engine load report older than this is ignored by the routing policies (s)",
    )
    routing_kv_limit: float = Field(
        0.8,
        gt=0,
        le=1,
        description="a neuron whose engine reports this share of its KV cache in use is "
        "avoided while another is not",
    )
    # Admission control (cortex/routing/admission.py; docs/deploy.md, "Admission control").
    replica_max_concurrency: int = Field(
        0,
        ge=-1,
        description="requests one replica takes at once; more wait in the model's admission "
        "queue. 0: the batch size its engine reports (vLLM's max_num_seqs; no cap if it "
        "reports none); -1: no caps, no queue",
    )
    admission_queue_size: int = Field(
        256,
        ge=0,
        description="requests per model that may wait for a replica slot; past it a request "
        "gets 503 model_overloaded at once",
    )
    admission_queue_timeout_s: float = Field(
        30.0,
        gt=0,
        description="how long a request may wait for a replica slot before it gets 503 "
        "model_overloaded (s)",
    )
    # Request caps (cortex/api/caps.py): each violation a 400 naming the
    # parameter, before any work is dispatched.
    max_messages: int = Field(
        2048,
        gt=0,
        description="messages in a chat request, or input items (with the chain they continue) "
        "in a Responses request: the chat template renders every one, on the neuron's CPU",
    )
    max_tools: int = Field(128, gt=0, description="tools in one request (OpenAI's limit, 128)")
    max_stop_sequences: int = Field(
        4, gt=0, description="stop sequences in one request (OpenAI allows 4, the most it takes)"
    )
    max_schema_bytes: int = Field(
        64 * 1024,
        gt=0,
        description="bytes of a structured output's JSON schema, or of one tool's parameters or "
        "grammar: the engine compiles each into a grammar before the first token",
    )
    max_completion_prompts: int = Field(
        128, gt=0, description="prompts in one /v1/completions list"
    )
    max_prompts_times_n: int = Field(
        256,
        gt=0,
        description="completions one /v1/completions request makes (prompts x n): each is a "
        "generation in the engine",
    )
    max_embedding_inputs: int = Field(
        2048, gt=0, description="inputs in one /v1/embeddings request (OpenAI's limit, 2048)"
    )
    max_embedding_input_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        description="bytes of all the inputs of one /v1/embeddings request (a token id counts 4)",
    )
    max_background_per_tenant: int = Field(
        16,
        gt=0,
        description="background responses one tenant may have running in one cortex process",
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        gt=0,
        le=MAX_MESSAGE_BYTES // 2,
        description="largest accepted request body; larger ones get 413 (at most half of the "
        "gRPC message limit, which leaves room for a previous_response_id chain)",
    )
    request_header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="time a client has to send a request's line and headers, from connecting "
        "(or from the next request's first byte on a kept-alive connection); past it 408 "
        "request_timeout and the connection is closed (a connection that sent nothing is just "
        "closed): slow or idle clients cannot hold connections",
    )
    request_body_timeout_s: float = Field(
        60.0,
        gt=0,
        description="time a client has to send a request's body once its headers are in; past "
        "it 408 request_timeout and the connection is closed (60 s: max_body_bytes at "
        "about 280 KB/s)",
    )
    max_header_count: int = Field(
        100, gt=0, description="most headers a request may have; past it 431 headers_too_large"
    )
    max_header_bytes: int = Field(
        16 * 1024,
        gt=0,
        description="largest request line and headers together, in bytes; past it 431 "
        "headers_too_large",
    )
    # The flag predates the field: --no-metrics (and so --metrics).
    metrics_enabled: Annotated[bool, Flag("metrics")] = Field(
        True, description="request metrics at /metrics (off only to measure what they cost)"
    )
    workers: int = Field(
        1, ge=1, le=64, description="uvicorn worker processes; metrics are added up across them"
    )
    shutdown_grace_s: float = Field(
        30.0,
        gt=0,
        description="seconds in-flight requests get to finish when cortex stops; streams "
        "still open near the end are ended with their terminal events",
    )
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
    # The Responses store's upkeep (cortex/api/responses/upkeep.py).
    responses_ttl_days: float = Field(
        30.0,
        ge=0,
        description="stored responses are deleted this many days after they were created "
        "(0: kept forever)",
    )
    responses_purge_interval_s: float = Field(
        3600.0,
        gt=0,
        description="how often expired stored responses are purged; one instance (or worker) "
        "sharing the store does it at a time",
    )
    responses_lease_s: float = Field(
        30.0,
        gt=0,
        description="a running stored response whose instance has not renewed its lease for "
        "this long (renewed every third of it) is marked failed by any instance sharing the store",
    )
    auth: Literal["off", "required"] = Field(
        "off",
        description="required: every /v1 request needs `Authorization: Bearer <key>` "
        "(keys: `neuraxis keys create`, kept in the same store as stored responses); off: "
        "one anonymous tenant, allowed on a loopback address only (see allow_unauthenticated)",
    )
    allow_unauthenticated: bool = Field(
        False,
        description="serve with auth = off on a non-loopback address (only behind a proxy "
        "that authenticates clients itself)",
    )
    rate_limit_counters: Literal["auto", "local", "shared"] = Field(
        "auto",
        description="where per-key rate-limit counters live: shared (in the key store, exact "
        "across workers and instances), local (in this process's memory: no store round trip "
        "per request, exact within the process, forgotten on restart); auto: local with one "
        "worker on SQLite, else shared",
    )
    auth_cache_s: float = Field(
        2.0,
        gt=0,
        description="how long a looked-up API key is trusted before it is read again: a "
        "revocation takes effect within this many seconds",
    )

    # Cluster mode: cortex starts or finds the controller in the Ray cluster
    # and follows its endpoint table instead of a static neuron list.
    ray_address: str | None = Field(
        None, description="cluster mode: the Ray head's address (host:port of its GCS)"
    )
    ray_head: bool = Field(
        False,
        description="cluster mode: run the Ray head here (the head host's service), on "
        "ray_port of ray_node_ip",
    )
    ray_port: int = Field(6379, ge=1, le=65535, description="the Ray head's port")
    ray_node_ip: str = Field("127.0.0.1", description="the address the Ray head listens on")
    ray_fixed_ports: bool = Field(
        False,
        description="fix the head's Ray ports (6380-6384, 52365, workers 10002-10999), as the "
        "firewalld service opens them; otherwise Ray picks free ones",
    )
    deployment: Path | None = Field(
        None, description="cluster mode: the deployment spec (TOML) the controller keeps true"
    )
    health_interval_s: float = Field(
        2.0, gt=0, description="how often the controller checks replicas and nodes (s)"
    )
    replica_start_timeout_s: float = Field(
        900.0,
        gt=0,
        description="how long a replica may take to load its model before it counts as failed (s)",
    )

    # Mutual TLS to the neurons (all three or none). docs/deploy.md, "Mutual TLS".
    tls_ca: Path | None = Field(
        None, description="mutual TLS: the CA certificate neurons' certificates must chain to"
    )
    tls_cert: Path | None = Field(
        None, description="mutual TLS: cortex's client certificate (PEM, signed by tls_ca)"
    )
    tls_key: Path | None = Field(None, description="mutual TLS: tls_cert's private key (PEM)")

    @field_validator("neurons")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"neuron address '{address}' is not host:port")
        return value

    @model_validator(mode="after")
    def _admin_apart(self) -> CortexSettings:
        if self.admin_port and self.admin_port == self.port:
            raise ValueError(f"admin_port and port are both {self.port}: give them two ports")
        return self

    @model_validator(mode="after")
    def _old_json_logs(self) -> CortexSettings:
        if self.json_logs is not None and "log_format" not in self.model_fields_set:
            self.log_format = "json" if self.json_logs else "text"
        return self

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

    @model_validator(mode="after")
    def _tls_complete(self) -> CortexSettings:
        tls_files(self.tls_ca, self.tls_cert, self.tls_key)
        return self

    @property
    def tls(self) -> TlsFiles | None:
        """The mutual-TLS files, or None: plaintext gRPC."""
        return tls_files(self.tls_ca, self.tls_cert, self.tls_key)

    @property
    def cluster_mode(self) -> bool:
        return self.ray_head or self.ray_address is not None

    def deadlines(self) -> Deadlines:
        return Deadlines(
            first_token_s=self.first_token_timeout_s,
            idle_s=self.idle_timeout_s,
            total_s=self.request_timeout_s,
        )

    def ejection(self) -> EjectionOptions:
        return EjectionOptions(
            consecutive_failures=self.eject_consecutive_failures,
            base_s=self.eject_base_s,
            max_s=self.eject_max_s,
        )

    @property
    def local_rate_limit_counters(self) -> bool:
        """Whether this process may keep the rate-limit counters to itself."""
        if self.rate_limit_counters == "auto":
            return self.workers == 1 and not self.postgres_dsn
        return self.rate_limit_counters == "local"

    def caps(self) -> RequestCaps:
        return RequestCaps(
            max_messages=self.max_messages,
            max_tools=self.max_tools,
            max_stop_sequences=self.max_stop_sequences,
            max_schema_bytes=self.max_schema_bytes,
            max_completion_prompts=self.max_completion_prompts,
            max_prompts_times_n=self.max_prompts_times_n,
            max_embedding_inputs=self.max_embedding_inputs,
            max_embedding_input_bytes=self.max_embedding_input_bytes,
            max_background_per_tenant=self.max_background_per_tenant,
        )

    def admission(self) -> AdmissionOptions:
        return AdmissionOptions(
            replica_max_concurrency=self.replica_max_concurrency,
            queue_size=self.admission_queue_size,
            queue_timeout_s=self.admission_queue_timeout_s,
        )

    def retry_budget(self) -> RetryBudgetOptions:
        return RetryBudgetOptions(ratio=self.retry_budget_ratio, minimum=self.retry_budget_min)

    def policy_table(self, spec_routing: Mapping[str, PolicyName] | None = None) -> PolicyTable:
        """The routing policies these settings ask for, one per model:
        `routing_models`, then the deployment spec's per-model `routing`
        (`spec_routing`), then `routing`. The more specific setting wins,
        and of two per-model ones this instance's own: the spec is shared by
        every cortex, `routing_models` is one instance's deliberate override."""
        options = PolicyOptions(
            epsilon=self.routing_epsilon,
            block_bytes=self.routing_block_bytes,
            max_blocks=self.routing_max_blocks,
            load_max_age_s=self.load_max_age_s,
            kv_limit=self.routing_kv_limit,
        )
        per_model = {**(spec_routing or {}), **self.routing_models}
        return PolicyTable(self.routing, per_model, options)
