"""A replica's neuron settings: built from the model's spec and the node's
generation as a `NeuronSettings`, and handed to the neuron as its
`NEURAXIS_NEURON_<FIELD>` environment variables, which the neuron's own
settings loader reads. No hand-written flags: a field the neuron does not
know fails here, at validation, not in the child.

Only the fields decided here are serialised; the rest (the model cache, the
drain timeout...) stay as the node's environment sets them. The replica adds
the host and ports (replica.py).
"""

from __future__ import annotations

import json
from typing import Any

from axon.generations import PROFILES, Generation
from axon.neuron_settings import NeuronSettings
from cortex.cluster.spec import ModelSpec


def replica_settings(model: ModelSpec, generation: Generation) -> NeuronSettings:
    """The settings of a replica of `model` on a node of `generation`."""
    engine = model.engine
    fields: dict[str, Any] = {"engine": engine.kind, "served_id": model.id}
    if engine.kind == "sim":
        fields.update(
            sim_ttft_s=engine.sim_ttft_s,
            sim_itl_s=engine.sim_itl_s,
            sim_load_s=engine.sim_load_s,
            sim_generation=generation,
        )
    else:
        fields.update(
            generation=generation,
            model=model.source,
            kv_cache_gib=engine.kv_cache_gib,
            dtype=engine.dtype or PROFILES[generation].dtype,
            tensor_parallel_size=model.tensor_parallel_size,
        )
    if model.task:
        fields["task"] = model.task
    if model.max_context:
        fields["max_model_len"] = model.max_context
    for name in (
        "quantization",
        "kv_cache_dtype",
        "tool_parser",
        "reasoning_parser",
        "scheduling_policy",
    ):
        value = getattr(engine, name)
        if value:
            fields[name] = value
    if model.lora is not None:
        fields.update(
            max_adapters=model.lora.max_adapters_per_replica,
            max_lora_rank=model.lora.max_rank,
            adapters=[f"{a.id}={a.source}" for a in model.adapters],
        )
    if model.revision and engine.kind == "vllm":
        fields["revision"] = model.revision
    # Validated as a model, not built as settings: the controller's own
    # environment (its NEURAXIS_NEURON_*) must not leak into a replica's.
    return NeuronSettings.model_validate(fields)


def settings_env(settings: NeuronSettings) -> dict[str, str]:
    """The settings' explicitly set fields as environment variables."""
    prefix = str(NeuronSettings.model_config.get("env_prefix", ""))
    # None is every optional field's default: leaving it out changes nothing.
    dumped = settings.model_dump(mode="json", include=settings.model_fields_set, exclude_none=True)
    return {f"{prefix}{name.upper()}": _env_value(value) for name, value in dumped.items()}


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps(value)  # how pydantic-settings reads a list
    return str(value)
