"""The engine's use of the grammar probe (grammar_probe.py): one probe over
the model's vocabulary, as vLLM's xgrammar backend reads it, and the check
that refuses a schema or grammar too slow to compile before vLLM sees it."""

from __future__ import annotations

import logging
from typing import Any

from axon.errors import InvalidRequestError
from axon.tasks import ModelTask
from neuron.engine.base import EngineRequest
from neuron.engine.vllm.errors import constraint_param
from neuron.engine.vllm.grammar_probe import CompileTimeoutError, GrammarProbe, probe_key

log = logging.getLogger("neuraxis.neuron")


def grammar_probe(
    timeout_s: float, task: ModelTask, llm: Any, tokenizer: Any
) -> GrammarProbe | None:
    """The probe for this engine; None when off, or when xgrammar cannot
    read this tokenizer (vLLM then picks another backend itself)."""
    if timeout_s <= 0 or task is not ModelTask.GENERATE:
        return None
    try:
        import xgrammar as xgr

        vocab_size = llm.model_config.get_vocab_size()
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    except Exception:
        log.warning("grammar probe off: xgrammar cannot read the tokenizer", exc_info=True)
        return None
    return GrammarProbe(timeout_s, info.serialize_json())


async def check_grammar(probe: GrammarProbe | None, request: EngineRequest, params: Any) -> None:
    """Refuse a schema or grammar that takes longer than the probe's bound
    to compile, before vLLM, which would not stop compiling it."""
    key = probe_key(params.structured_outputs) if probe is not None else None
    if probe is None or key is None:
        return
    try:
        await probe.check(*key)
    except CompileTimeoutError:
        param = constraint_param(request)
        raise InvalidRequestError(
            f"Invalid '{param}': the schema or grammar takes this model server more than "
            f"{probe.timeout_s:g} s to compile; simplify it (fewer properties, "
            "smaller length and item bounds).",
            param=param,
        ) from None
