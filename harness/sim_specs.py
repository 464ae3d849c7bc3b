"""Deployment-spec entries for simulated replicas, written as TOML text for
the tests and benchmarks that start a cluster of them, and LoRA adapter
directories as the spec's checks read them. No Ray here: a test that only
writes a spec for `neuraxis head` need not import it."""

from __future__ import annotations

import json
from pathlib import Path


def sim_replicas_spec(model: str, replicas: int) -> str:
    """A deployment-spec entry: `replicas` simulated replicas of `model` on
    ada or newer (50 ms to the first token, 20 ms between tokens)."""
    return f"""
[[models]]
id = "{model}"
source = "sim"
replicas = {replicas}
min_generation = "ada"
[models.engine]
kind = "sim"
sim_ttft_s = 0.05
sim_itl_s = 0.02
"""


def pinned_replica_spec(model: str, generation: str, engine: str = "") -> str:
    """A deployment-spec entry: one simulated replica of `model` that only a
    `generation` node may host; `engine`: more lines of its [models.engine]
    table."""
    return f"""
[[models]]
id = "{model}"
source = "sim"
replicas = 1
generations = ["{generation}"]
[models.engine]
kind = "sim"
{engine}
"""


def autoscaled_spec(model: str, autoscale: str, engine: str = "") -> str:
    """A deployment-spec entry: `model` autoscaled on CPU nodes, its
    [models.autoscale] table the `autoscale` lines (50 ms to the first
    token, 20 ms between tokens; `engine`: more lines of [models.engine])."""
    return f"""
[[models]]
id = "{model}"
source = "sim"
generations = ["cpu"]
[models.engine]
kind = "sim"
sim_ttft_s = 0.05
sim_itl_s = 0.02
{engine}
[models.autoscale]
{autoscale}
"""


def adapter_dir(
    root: Path, name: str, rank: int = 8, base: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
) -> Path:
    """A LoRA adapter's directory as the spec's checks read it: only PEFT's
    adapter_config.json (its rank and base model), no weights."""
    directory = root / name
    directory.mkdir()
    (directory / "adapter_config.json").write_text(
        json.dumps({"r": rank, "base_model_name_or_path": base})
    )
    return directory


def lora_spec(a1: Path | str, a2: Path | str, max_rank: int = 16) -> str:
    """SmolLM2 with `[models.lora]` and two adapters, `support` and `legal`."""
    return f"""
[[models]]
id = "chat"
source = "smollm2-135m-instruct"
generations = ["cpu"]
[models.lora]
max_adapters_per_replica = 2
max_rank = {max_rank}
[[models.adapters]]
id = "support"
source = "{a1}"
[[models.adapters]]
id = "legal"
source = "{a2}"
"""
