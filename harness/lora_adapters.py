"""LoRA adapters made with `peft` on the prepared SmolLM2, as the tests on
real vLLM (tests/integration/test_lora_real.py) and bench/lora.py serve
them (issue 28: rank 8, non-zero weights, PEFT's format).

`init_lora_weights=False` leaves both LoRA matrices random and non-zero
(peft's default zeroes B, which would change nothing), so each adapter
answers differently from the base. The torch seed is fixed per adapter:
the same name gets the same weights on every run. Seconds and ~2 MB each.

What does not live here: the base model's preparation (neuron/models/).
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
SEED = 2028  # the i-th adapter of a call: SEED + i


def prepared_model(served_id: str = DEFAULT_CHAT_MODEL) -> Path:
    """A bundled model's directory in the cache, prepared if it is not yet."""
    return prepare(default_cache_dir(), BUNDLED_MODELS[served_id], lambda _: None)


def make_adapters(base: Path, out: Path, names: Sequence[str]) -> dict[str, Path]:
    """One adapter of `base` per name in `out/<name>`, by name; one already
    there (its adapter_config.json written) is kept."""
    # Heavy imports (seconds) only when adapters are made.
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    made: dict[str, Path] = {}
    for i, name in enumerate(names):
        target = out / name
        made[name] = target
        if (target / "adapter_config.json").is_file():
            continue
        # A fresh base each time: get_peft_model changes the model it wraps.
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        config = LoraConfig(
            r=RANK, lora_alpha=ALPHA, target_modules=list(TARGET_MODULES), init_lora_weights=False
        )
        torch.manual_seed(SEED + i)
        get_peft_model(model, config).save_pretrained(str(target))
    return made
