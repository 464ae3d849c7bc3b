"""The deployment spec: which models the cluster serves, and where.

A TOML file on the cortex side, one `[[models]]` table per model:

    [[models]]
    id = "smollm2-135m-instruct"   # the id clients ask for
    source = "smollm2-135m-instruct"  # a bundled model id, a model directory on
                                      # the neuron hosts, or a Hugging Face repo
                                      # id (org/name) fetched into their HF_HOME
    # revision = "v1.0"            # with a repo id: its pinned branch, tag or commit
    replicas = 2
    min_generation = "ada"         # or: generations = ["ada", "blackwell"]
    tensor_parallel_size = 1
    max_context = 2048
    routing = "prefix_affinity"    # this model's routing policy (cortex's
                                   # routing_models still overrides it)
    [models.engine]
    kv_cache_dtype = "fp8"         # checked against each generation's profile
    [models.autoscale]             # replicas follow the load (cortex/cluster/autoscale.py)
    min_replicas = 0               # 0: scale to zero when idle, wake on a request
    max_replicas = 4
    [models.lora]                  # LoRA adapters of this model
    max_adapters_per_replica = 4   # held on one replica's engine at once (max_loras)
    max_rank = 16                  # the highest rank an adapter may have
    [[models.adapters]]            # one table per adapter: a model to clients
    id = "support-bot"             # the id clients ask for (its parent: this model)
    source = "/var/lib/neuraxis/adapters/support-bot"  # PEFT's directory, on
                                   # every eligible host or shared storage

An invalid spec is refused at start with the line and the reason; so is an
adapter whose directory has no adapter_config.json, a rank above max_rank or
another base model (axon/adapters.py), checked where the spec is read. Whether a
generation can run a model's engine options is decided at placement
(cortex/cluster/placement.py), where the nodes are known.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from axon.adapters import AdapterSourceError, check_adapter
from axon.generations import GPU_GENERATIONS, Generation
from cortex.routing.factory import PolicyName


class SpecError(Exception):
    """The spec is invalid; the message names the file, the line and why."""


class _KeyedError(ValueError):
    """A model's contradiction between settings, raised by a validator of the
    whole model: `key` says which line of its table the error points to."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class EngineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["vllm", "sim"] = "vllm"
    # None: the generation profile's default.
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    # The CPU backend's KV cache, in whole GiB.
    kv_cache_gib: int = Field(1, ge=1)
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    # The engine's queue order (priority: by the requests' classes).
    scheduling_policy: Literal["fcfs", "priority"] | None = None
    # Simulated engine only.
    sim_ttft_s: float = Field(0.01, ge=0)
    sim_itl_s: float = Field(0.005, ge=0)
    # How long a simulated replica takes to load (a cold start to measure).
    sim_load_s: float = Field(0.0, ge=0)


class AutoscaleSpec(BaseModel):
    """A model's `[models.autoscale]` table: its replica count follows the
    load between `min_replicas` and `max_replicas` (docs/deploy.md,
    "Autoscaling")."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(ge=1)
    # Requests in flight (and queued) one replica should carry; None: 0.7 ×
    # the replica's concurrency cap as cortex reports it.
    target_in_flight: float | None = Field(None, gt=0)
    # How long the load must want more (fewer) replicas before the count
    # moves: a spike shorter than scale_up_after_s adds none, and a replica
    # is given back only after minutes of less load.
    scale_up_after_s: float = Field(10.0, ge=0)
    scale_down_after_s: float = Field(300.0, ge=0)
    # With min_replicas = 0: the idle time (nothing in flight or queued)
    # after which the last replica goes.
    scale_to_zero_after_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> AutoscaleSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})"
            )
        if self.scale_to_zero_after_s is not None and self.min_replicas > 0:
            raise ValueError("scale_to_zero_after_s needs min_replicas = 0")
        return self

    def idle_after_s(self) -> float:
        """Seconds of idleness before a min_replicas = 0 model goes to zero."""
        if self.scale_to_zero_after_s is not None:
            return self.scale_to_zero_after_s
        return max(self.scale_down_after_s, DEFAULT_SCALE_TO_ZERO_S)


class LoraSpec(BaseModel):
    """A model's `[models.lora]` table: how its replicas hold adapters."""

    model_config = ConfigDict(extra="forbid")

    # vLLM's max_loras: adapters on one replica's engine at once; a request
    # for another loads it there, evicting the least recently used idle one.
    max_adapters_per_replica: int = Field(1, ge=1)
    # vLLM's max_lora_rank: an adapter of a higher rank is refused.
    max_rank: int = Field(16, ge=1)


class AdapterSpec(BaseModel):
    """One `[[models.adapters]]` entry: a LoRA adapter of the model."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    # A directory in PEFT's format (adapter_config.json and the weights) on
    # every host that may run the model, or on shared storage.
    source: str = Field(min_length=1)


# With min_replicas = 0 and no scale_to_zero_after_s: the idle time before
# the last replica goes (a replica's load can take minutes: not too eager).
DEFAULT_SCALE_TO_ZERO_S = 900.0


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    # A Hugging Face repo id's pinned revision; None: its main branch.
    revision: str | None = Field(None, min_length=1)
    task: Literal["generate", "embed"] | None = None
    replicas: int = Field(1, ge=0)
    generations: list[Generation] | None = None
    min_generation: Generation | None = None
    tensor_parallel_size: int = Field(1, ge=1)
    max_context: int | None = Field(None, ge=16)
    # None: cortex's `routing` setting. Every cortex that loads this spec
    # routes the model the same way; cortex's own `routing_models` is the
    # local override (an instance trying another policy).
    routing: PolicyName | None = None
    engine: EngineSpec = Field(default_factory=lambda: EngineSpec.model_validate({}))
    # None: `replicas` stays as given. With the table, `replicas` (if given)
    # is the count the model starts at, within min..max.
    autoscale: AutoscaleSpec | None = None
    # None: no LoRA. With the table, `adapters` are served on this model.
    lora: LoraSpec | None = None
    adapters: list[AdapterSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _adapters_need_lora(self) -> ModelSpec:
        if self.adapters and self.lora is None:
            raise _KeyedError("adapters", "adapters need a [models.lora] table")
        if self.lora is not None and self.task == "embed":
            raise _KeyedError("lora", "LoRA adapters are for generating models, not embed")
        return self

    @model_validator(mode="after")
    def _scaled(self) -> ModelSpec:
        scale = self.autoscale
        if scale is None:
            return self
        if "replicas" not in self.model_fields_set:
            self.replicas = scale.min_replicas
        elif not scale.min_replicas <= self.replicas <= scale.max_replicas:
            # The table's own line: the contradiction is between it and `replicas`.
            raise _KeyedError(
                "replicas",
                f"replicas = {self.replicas} is outside autoscale's "
                f"{scale.min_replicas}..{scale.max_replicas}",
            )
        return self

    @model_validator(mode="after")
    def _where(self) -> ModelSpec:
        if (self.generations is None) == (self.min_generation is None):
            raise ValueError("give either 'generations' or 'min_generation'")
        if self.min_generation is Generation.CPU:
            raise ValueError(
                "'min_generation' takes a GPU generation; for CPU nodes use generations = [\"cpu\"]"
            )
        allowed = self.allowed_generations()
        if not allowed:
            raise ValueError("'generations' is empty")
        if Generation.CPU in allowed and len(allowed) > 1:
            raise ValueError("'cpu' cannot be mixed with GPU generations")
        if Generation.CPU in allowed and self.tensor_parallel_size != 1:
            raise ValueError("'tensor_parallel_size' must be 1 on cpu")
        return self

    def allowed_generations(self) -> list[Generation]:
        """The generations the spec allows, oldest first."""
        if self.min_generation is not None:
            start = GPU_GENERATIONS.index(self.min_generation)
            return list(GPU_GENERATIONS[start:])
        return sorted(set(self.generations or []), key=_generation_order)

    def gpus_per_replica(self) -> int:
        return 0 if self.allowed_generations() == [Generation.CPU] else self.tensor_parallel_size


class DeploymentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ModelSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> DeploymentSpec:
        seen: set[str] = set()
        for model in self.models:
            for model_id in [model.id, *(a.id for a in model.adapters)]:
                if model_id in seen:
                    raise ValueError(f"model id '{model_id}' appears twice")
                seen.add(model_id)
        return self

    def model(self, model_id: str) -> ModelSpec | None:
        return next((m for m in self.models if m.id == model_id), None)

    def adapters(self) -> dict[str, str]:
        """Each adapter's id and its base model's."""
        return {a.id: m.id for m in self.models for a in m.adapters}

    def routing(self) -> dict[str, PolicyName]:
        """The models that name a routing policy, and the policy."""
        return {m.id: m.routing for m in self.models if m.routing is not None}


def _generation_order(generation: Generation) -> int:
    return -1 if generation is Generation.CPU else GPU_GENERATIONS.index(generation)


def load_spec(path: Path) -> DeploymentSpec:
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"deployment spec {path}: {e.strerror}") from None
    return parse_spec(text, str(path))


def parse_spec(text: str, source: str) -> DeploymentSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{source}: {e}") from None
    try:
        spec = DeploymentSpec.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _KeyedError):
            loc = (*loc, cause.key)
        where = ".".join(str(p) for p in loc) or "(file)"
        line = line_of(text, loc)
        at = f" line {line}" if line else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        raise SpecError(f"{source}:{at}: {where}: {message}") from None
    check_adapters(spec, text, source)
    return spec


def check_adapters(spec: DeploymentSpec, text: str, source: str) -> None:
    """Refuse, with its line and the reason, an adapter its model's engine
    could not load: no adapter_config.json, a rank above max_rank, another
    base model. The sim engine reads no adapter: its are not checked."""
    for m, model in enumerate(spec.models):
        if model.lora is None or model.engine.kind == "sim":
            continue
        for a, adapter in enumerate(model.adapters):
            try:
                check_adapter(adapter.source, model.lora.max_rank, (model.source, model.id))
            except AdapterSourceError as e:
                loc = ("models", m, "adapters", a, "source")
                line = line_of(text, loc)
                at = f" line {line}" if line else ""
                raise SpecError(f"{source}:{at}: models.{m}.adapters.{a}: {e}") from None


def line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """The line of the setting at `loc` (models, index, key...), or of its
    `[[models]]` table when the key itself is missing."""
    if len(loc) < 2 or loc[0] != "models" or not isinstance(loc[1], int):
        return None
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if re.match(r"\s*\[\[\s*models\s*\]\]", line)]
    if loc[1] >= len(headers):
        return None
    start = headers[loc[1]]
    end = headers[loc[1] + 1] if loc[1] + 1 < len(headers) else len(lines)
    if len(loc) >= 4 and loc[2] == "adapters" and isinstance(loc[3], int):
        # Within the model: its n-th `[[models.adapters]]` table.
        entries = [i for i in range(start, end) if _ADAPTERS.match(lines[i])]
        if loc[3] < len(entries):
            start = entries[loc[3]]
            end = next((i for i in range(start + 1, end) if _TABLE.match(lines[i])), end)
    keys = [p for p in loc[2:] if isinstance(p, str)]
    for key in reversed(keys):
        # `key = ...`, or the header of its sub-table (`[models.autoscale]`,
        # `[[models.adapters]]`).
        pattern = re.compile(
            rf"\s*(?:{re.escape(key)}\s*=|\[\[?\s*models\s*\.\s*{re.escape(key)}\s*\]\]?)"
        )
        for i in range(start, end):
            if pattern.match(lines[i]):
                return i + 1
    return start + 1


_ADAPTERS = re.compile(r"\s*\[\[\s*models\s*\.\s*adapters\s*\]\]")
_TABLE = re.compile(r"\s*\[")


def spec_to_dict(spec: DeploymentSpec) -> dict[str, Any]:
    """The spec as plain data (for passing to the controller actor)."""
    return spec.model_dump(mode="json")
