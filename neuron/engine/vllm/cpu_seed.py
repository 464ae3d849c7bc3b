"""A seeded request whose prompt is prefilled in chunks kills vLLM 0.32's CPU
engine; this keeps it alive (issue 31 point 9).

vLLM gives each request with a `seed` a torch.Generator of its own. After a
step that prefilled only part of a prompt, it throws away the token that
step sampled and winds the request's generator back
(`GPUModelRunner._bookkeeping_sync`, vllm/v1/worker/gpu_model_runner.py:
`gen.set_offset(gen.get_offset() - 4)`). A CUDA generator has an offset; a
CPU one does not: `RuntimeError: CPU Generator does not use offset`, raised
in the engine core's step, which ends the engine and every request on it.
On the CPU backend chunked prefill is on and a step takes at most
max_num_batched_tokens (2,048) prompt tokens, so one seeded request with a
longer prompt is enough, or 64 seeded streams whose prompts start together.

The neuron hides the generators from that wind-back on the CPU: a seeded
request that was prefilled in chunks draws from its generator once more per
extra chunk, so the same seed may give another answer when the prompt was
split differently (OpenAI promises a seed's determinism only "mostly").
Nothing changes for a CUDA generator. The runner lives in vLLM's worker
process, which vLLM starts afresh: it loads this module as a vLLM plugin
(the `vllm.general_plugins` entry point in pyproject.toml, `plugin`), and the
wrapper goes in only where the neuron's engine set CPU_SEED_FIX_ENV, so that
a `vllm serve` in the same environment stays vLLM's own.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

Bookkeeping = Callable[..., Any]
# Set by the neuron's vLLM engine for vLLM's processes (args.py).
CPU_SEED_FIX_ENV = "NEURAXIS_VLLM_CPU_SEED_FIX"


def without_cpu_generators(original: Bookkeeping) -> Bookkeeping:
    """`original` (the runner's bookkeeping after sampling) run on a CPU
    runner with its input batch's generators out of sight: its only use of
    them is the wind-back a CPU generator cannot do. Sampling is over by
    then, so nothing else misses them."""

    @functools.wraps(original)
    def bookkeeping(runner: Any, *args: Any, **kwargs: Any) -> Any:
        if runner.device.type != "cpu":
            return original(runner, *args, **kwargs)
        batch = runner.input_batch
        generators, batch.generators = batch.generators, {}
        try:
            return original(runner, *args, **kwargs)
        finally:
            batch.generators = generators

    bookkeeping.neuraxis_cpu_seed = True  # type: ignore[attr-defined]
    return bookkeeping


def plugin() -> None:
    """vLLM's general plugin hook, called in each of its processes."""
    if os.environ.get(CPU_SEED_FIX_ENV) == "1":
        keep_seeded_chunked_prefill_alive()


def keep_seeded_chunked_prefill_alive() -> None:
    """Wrap vLLM's runner, once."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    current = GPUModelRunner._bookkeeping_sync
    if not getattr(current, "neuraxis_cpu_seed", False):
        GPUModelRunner._bookkeeping_sync = without_cpu_generators(current)
