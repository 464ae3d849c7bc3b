"""LoRA adapters as both sides name and check them.

An adapter is a directory in PEFT's format: `adapter_config.json` (its rank
`r`, the base model it was trained on `base_model_name_or_path`) beside its
weights. The deployment spec (cortex) and the neuron that loads it read the
same file here, so an adapter is refused for the same reasons, in the same
words, wherever it is checked. A neuron's adapters are given as `ID=DIR`
(vLLM's `--lora-modules` spelling).

What does not live here: which replica holds which adapter (the neuron's
engine, neuron/engine/adapters.py) and the routing to them (cortex).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = "adapter_config.json"


class AdapterSourceError(ValueError):
    """The adapter's source cannot be served; the message says why."""


@dataclass(frozen=True)
class AdapterSource:
    """An adapter's id (what clients ask for) and its directory."""

    id: str
    source: str

    def spelled(self) -> str:
        return f"{self.id}={self.source}"


@dataclass(frozen=True)
class AdapterConfig:
    """What this project reads from an adapter's adapter_config.json."""

    rank: int
    base_model: str  # "" when the file does not say


def parse_adapter(text: str) -> AdapterSource:
    """`ID=DIR` as an adapter (ValueError naming the mistake)."""
    adapter_id, sep, source = text.partition("=")
    if not sep or not adapter_id.strip() or not source.strip():
        raise ValueError(f"adapter '{text}' is not ID=DIR")
    return AdapterSource(adapter_id.strip(), source.strip())


def read_config(source: str | Path) -> AdapterConfig:
    """The adapter's rank and base model, or AdapterSourceError."""
    path = Path(source).expanduser() / CONFIG_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AdapterSourceError(f"{source} has no {CONFIG_FILE}") from None
    except OSError as e:
        raise AdapterSourceError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise AdapterSourceError(f"{path} is not valid JSON: {e}") from None
    rank = data.get("r") if isinstance(data, dict) else None
    if not isinstance(rank, int) or rank <= 0:
        raise AdapterSourceError(f"{path} gives no rank ('r')")
    base = data.get("base_model_name_or_path") or ""
    return AdapterConfig(rank=rank, base_model=str(base))


def check_adapter(source: str | Path, max_rank: int, base_names: tuple[str, ...]) -> AdapterConfig:
    """The adapter's config when it can run on a base model known by any of
    `base_names` (its id, its source) with ranks up to `max_rank`; else
    AdapterSourceError with the reason."""
    config = read_config(source)
    if config.rank > max_rank:
        raise AdapterSourceError(f"{source}: rank {config.rank} is above max_rank {max_rank}")
    if config.base_model and not same_model(config.base_model, base_names):
        raise AdapterSourceError(
            f"{source} was trained on '{config.base_model}', not on "
            f"'{base_names[0] if base_names else '?'}'"
        )
    return config


def same_model(base_model: str, names: tuple[str, ...]) -> bool:
    """Whether an adapter's base_model_name_or_path names one of `names`: a
    local path, a repo id (org/name) and a bundled id name the same model
    when their last parts agree, case aside (the bundled
    smollm2-135m-instruct is HuggingFaceTB/SmolLM2-135M-Instruct)."""
    wanted = _last_part(base_model)
    return any(_last_part(name) == wanted for name in names if name)


def _last_part(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()
