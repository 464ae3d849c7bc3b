"""What `neuraxis up` (the embedded default on one machine) runs, from its
options: EmbeddedOptions, the deployment spec it hands cortex in Ray mode,
and the options and log settings every cortex it starts gets.

The rest of `up`: the command (commands/up.py), its two run modes (on a
local Ray: embedded_ray.py; --static, without Ray: embedded_static.py),
the supervision of its children (supervisor.py) and what it prints
(console.py, progress.py, replica_watch.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from axon.logs import LogFormat, resolve_format
from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from axon.tracing import OtlpProtocol
from cortex.routing.factory import PolicyName

# In the state directory while `up` runs: the local Ray's address and token.
EMBEDDED_CLUSTER_FILE = "embedded-cluster.json"


class EmbeddedOptions(BaseModel):
    """`neuraxis up`'s options (generated from these fields, as the services'
    are from their settings: neuraxis/options.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="cortex HTTP address")
    auth: Literal["off", "required"] = Field(
        "off",
        description="required: API keys (`neuraxis keys create` with the same --state-dir) "
        "on every /v1 request; off: anyone who reaches cortex may use it, so it stays on a "
        "loopback address",
    )
    port: int = Field(8080, description="cortex HTTP port")
    admin_port: int = Field(
        9180, description="cortex admin port, on 127.0.0.1: /metrics and /sd/neurons"
    )
    neuron_port: int = Field(50051, description="chat neuron gRPC port")
    embedding_port: int = Field(50052, description="embedding neuron gRPC port")
    neuron_metrics_port: int = Field(9400, description="chat neuron metrics port")
    embedding_metrics_port: int = Field(9401, description="embedding neuron metrics port")
    cache_dir: Path | None = Field(None, description="model cache (default ~/.cache/neuraxis)")
    state_dir: Path | None = Field(
        None, description="state: the Responses store (default ~/.local/state/neuraxis)"
    )
    kv_cache_gib: int = Field(1, description="KV cache size in whole GiB")
    replicas: int = Field(
        1, ge=1, le=16, description="replicas of the chat model (more than one: not with --static)"
    )
    routing: PolicyName | None = Field(
        None, description="cortex's routing policy (default: cortex's own default)"
    )
    max_model_len: int | None = Field(None, description="context length (default: the model's)")
    static: bool = Field(
        False, description="start the neurons directly, without Ray (the --*-port options apply)"
    )
    deployment: Path | None = Field(
        None,
        description="run this deployment spec (models, replicas, autoscale tables) on the "
        "local Ray instead of the bundled models; its models must run on this machine's CPU "
        '(generations = ["cpu"]) unless --engine sim',
    )
    engine: Literal["vllm", "sim"] = Field(
        "vllm",
        description="sim: simulated engines instead of vLLM, a testing tool (no model: made-up "
        "tokens at --sim-ttft-s/--sim-itl-s) for trying tenants, limits, routing, load and "
        "autoscaling; every model of the spec becomes a sim replica on this machine",
    )
    sim_ttft_s: float = Field(0.05, ge=0, description="--engine sim: time to the first token (s)")
    sim_itl_s: float = Field(0.02, ge=0, description="--engine sim: time between tokens (s)")
    ray_port: int = Field(0, description="the local Ray head's port (0: a free one)")
    verbose: bool = Field(
        False,
        description="every log line on the console; otherwise, on a terminal, the progress, "
        "warnings and errors only",
    )
    log_format: LogFormat = Field(
        "auto",
        description="log lines as text or JSON (auto: text on a terminal, JSON otherwise "
        "and under systemd)",
    )
    otlp_endpoint: str | None = Field(
        None,
        description="OpenTelemetry traces of cortex and every neuron to this OTLP collector "
        "(e.g. http://127.0.0.1:4317); unset: no tracing",
    )
    otlp_protocol: OtlpProtocol = Field(
        "grpc", description="the OTLP exporter's protocol: grpc or http/protobuf"
    )
    trace_sample_ratio: float = Field(
        1.0, ge=0.0, le=1.0, description="share of traces started in cortex that are recorded"
    )

    @model_validator(mode="after")
    def _replicas_on_ray(self) -> EmbeddedOptions:
        # --static places its neurons on the fixed --*-port options; several
        # chat replicas are Ray's to place, on ports of their choosing.
        if self.static and self.replicas > 1:
            raise ValueError("--replicas above 1 needs Ray: leave out --static")
        if self.static and (self.deployment is not None or self.engine == "sim"):
            raise ValueError("--deployment and --engine sim need Ray: leave out --static")
        if self.deployment is not None and self.replicas != 1:
            raise ValueError("--replicas is the bundled model's: the spec says its own")
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        # cortex's admin listener stays on its default address, loopback.
        return f"http://127.0.0.1:{self.admin_port}"


def embedded_spec(options: EmbeddedOptions) -> str:
    """The embedded deployment: the bundled chat model (`--replicas` of it)
    and the embedding model (one replica), on the CPU. The routing policy is
    not in the spec but given to cortex (`--routing`), as for any cortex."""
    context = f"max_context = {options.max_model_len}\n" if options.max_model_len else ""
    chat = _SPEC_MODEL.format(
        model=DEFAULT_CHAT_MODEL, replicas=options.replicas, extra=context, kv=options.kv_cache_gib
    )
    # Pooling needs no room for generated tokens: the smallest KV cache.
    embedding = _SPEC_MODEL.format(model=DEFAULT_EMBEDDING_MODEL, replicas=1, extra="", kv=1)
    return f"{chat}\n{embedding}"


_SPEC_MODEL = """[[models]]
id = "{model}"
source = "{model}"
replicas = {replicas}
generations = ["cpu"]
{extra}[models.engine]
kv_cache_gib = {kv}
"""


def cortex_command(options: EmbeddedOptions, *where: str) -> list[str]:
    """`up`'s cortex, in either mode: `where` says where its neurons are
    (the Ray cluster and spec, or the static neurons and models). Its gRPC
    to the neurons is plaintext on purpose: every neuron is on loopback."""
    command = ["cortex", "--host", options.host, "--port", str(options.port), "--plaintext"]
    return [*command, "--auth", options.auth, *where, *cortex_options(options)]


def cortex_options(options: EmbeddedOptions) -> list[str]:
    """The options `up` passes on to its cortex, in either mode."""
    args = ["--admin-port", str(options.admin_port)]
    if options.state_dir is not None:
        args += ["--state-dir", str(options.state_dir)]
    if options.routing is not None:
        args += ["--routing", options.routing.value]
    return args


def tracing_env(options: EmbeddedOptions) -> dict[str, str]:
    """The tracing settings of cortex and of every neuron `up` starts, as
    their environment (replicas started by Ray inherit the head's, as they
    do the node's other settings); empty without --otlp-endpoint."""
    if not options.otlp_endpoint:
        return {}
    env = {}
    for service in ("CORTEX", "NEURON"):
        env[f"NEURAXIS_{service}_OTLP_ENDPOINT"] = options.otlp_endpoint
        env[f"NEURAXIS_{service}_OTLP_PROTOCOL"] = options.otlp_protocol
        env[f"NEURAXIS_{service}_TRACE_SAMPLE_RATIO"] = str(options.trace_sample_ratio)
    return env


def cortex_logging(options: EmbeddedOptions) -> dict[str, str]:
    """cortex's log settings: on a terminal only its warnings and errors
    (the progress lines say the rest), unless --verbose; JSON for a file, a
    pipe or the journal keeps every line, since a machine reads those."""
    chosen = resolve_format(options.log_format, sys.stderr)
    quiet = chosen == "text" and not options.verbose
    return {
        "NEURAXIS_CORTEX_LOG_FORMAT": options.log_format,
        "NEURAXIS_CORTEX_LOG_LEVEL": "warning" if quiet else "info",
    }
