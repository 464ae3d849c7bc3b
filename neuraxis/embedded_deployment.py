"""The deployment spec `neuraxis up` runs on its local Ray: the bundled
models (embedded.embedded_spec), a spec of the user's (`--deployment FILE`:
models, replicas, autoscale tables), and either one on simulated engines
(`--engine sim`, a testing tool: every model becomes a sim replica on the
local CPU node, which is the only node `up` starts).

The result is TOML text for cortex's `--deployment`; a spec that does not
validate is refused here, with its line, before anything starts.
"""

from __future__ import annotations

import json
from typing import Any

from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from cortex.cluster.spec import DeploymentSpec, load_spec, parse_spec
from neuraxis.embedded import EmbeddedOptions, embedded_spec

# A GPU spec's placement fields, which the CPU-only local node cannot honour.
_WHERE = ("generations", "min_generation", "tensor_parallel_size")


def up_spec(options: EmbeddedOptions) -> str:
    """The spec `up` hands its cortex (SpecError when the file is invalid)."""
    if options.deployment is not None:
        spec = load_spec(options.deployment)
    elif options.engine == "sim":
        # The bundled chat model's id on simulated engines (the sim engine
        # generates only: no embedding model).
        spec = DeploymentSpec.model_validate(
            {
                "models": [
                    {
                        "id": DEFAULT_CHAT_MODEL,
                        "source": "sim",
                        "replicas": options.replicas,
                        "generations": ["cpu"],
                    }
                ]
            }
        )
    else:
        return embedded_spec(options)
    if options.engine == "sim":
        spec = _on_sim(spec, options)
    text = spec_toml(spec)
    parse_spec(text, str(options.deployment or "up"))  # what cortex will read back
    return text


def _on_sim(spec: DeploymentSpec, options: EmbeddedOptions) -> DeploymentSpec:
    models = []
    for model in spec.models:
        data = model.model_dump(mode="json", exclude_unset=True, exclude=set(_WHERE))
        data["generations"] = ["cpu"]
        data["engine"] = {
            "kind": "sim",
            "sim_ttft_s": options.sim_ttft_s,
            "sim_itl_s": options.sim_itl_s,
            "sim_load_s": model.engine.sim_load_s,
        }
        models.append(data)
    return DeploymentSpec.model_validate({"models": models})


def spec_toml(spec: DeploymentSpec) -> str:
    """`spec` as deployment-spec TOML (the fields that were set, or differ
    from their defaults)."""
    out: list[str] = []
    for model in spec.models:
        data = model.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        data.setdefault("replicas", model.replicas)  # 1 is the default; say it
        tables = {
            k: data.pop(k) for k in ("engine", "autoscale", "lora") if isinstance(data.get(k), dict)
        }
        adapters = data.pop("adapters", [])
        out.append("[[models]]")
        out += [f"{key} = {_value(value)}" for key, value in data.items()]
        for name, table in tables.items():
            out.append(f"[models.{name}]")
            out += [f"{key} = {_value(value)}" for key, value in table.items()]
        for adapter in adapters:
            out.append("[[models.adapters]]")
            out += [f"{key} = {_value(value)}" for key, value in adapter.items()]
        out.append("")
    return "\n".join(out)


def _value(value: Any) -> str:
    # JSON's strings, numbers, booleans and lists of them are valid TOML.
    return json.dumps(value)


def bundled_sources(spec_text: str, options: EmbeddedOptions) -> list[str]:
    """The bundled models `up` prepares before it starts: the embedded
    default's two, a --deployment spec's vLLM models whose source is a
    bundled id, none on simulated engines."""
    from neuron.models.bundled import BUNDLED_MODELS

    if options.deployment is None and options.engine == "vllm":
        return [DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL]
    spec = parse_spec(spec_text, "up")
    found = [
        m.source for m in spec.models if m.engine.kind == "vllm" and m.source in BUNDLED_MODELS
    ]
    return list(dict.fromkeys(found))
