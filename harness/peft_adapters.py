"""Small LoRA adapters made with `peft` on a prepared base model, as the
tests on real vLLM use them (issue 28's acceptance: rank 8, non-zero
weights, saved in PEFT's format).

`init_lora_weights=False` leaves both LoRA matrices as torch initialises a
linear layer (random, non-zero; peft's default zeroes B, which would change
nothing), so an adapter's answers differ from the base's. The torch seed is
fixed per adapter: the same adapter has the same weights on every run, and
two adapters made here differ from each other. Making one takes seconds on
the CPU and ~2 MB on disk.

What does not live here: the base model's preparation (neuron/models/) and
the stacks that serve the adapters (tests/integration/test_lora_real.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from axon.neuron_settings import DEFAULT_CHAT_MODEL
from neuron.models.bundled import BUNDLED_MODELS
from neuron.models.prepare import default_cache_dir, prepare

RANK = 8
ALPHA = 16
TARGET_MODULES = ("q_proj", "v_proj")
# The first adapter's seed; the i-th adapter of a call gets SEED + i.
SEED = 2028


def prepared_model(served_id: str = DEFAULT_CHAT_MODEL) -> Path:
    """A bundled model's directory in the cache, prepared if it is not
    (as a neuron prepares it on start; a second call does nothing)."""
    return prepare(default_cache_dir(), BUNDLED_MODELS[served_id], lambda _: None)


def make_adapters(base: Path, out: Path, names: Sequence[str]) -> dict[str, Path]:
    """One adapter of `base` per name, each in `out/<name>` (PEFT's
    adapter_config.json and adapter_model.safetensors), by name."""
    # Heavy imports (seconds) only where adapters are made.
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    made: dict[str, Path] = {}
    for i, name in enumerate(names):
        # A fresh base each time: get_peft_model changes the model it wraps.
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        config = LoraConfig(
            r=RANK,
            lora_alpha=ALPHA,
            target_modules=list(TARGET_MODULES),
            init_lora_weights=False,
        )
        torch.manual_seed(SEED + i)
        peft_model = get_peft_model(model, config)
        target = out / name
        peft_model.save_pretrained(str(target))
        made[name] = target
    return made
