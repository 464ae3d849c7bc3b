"""POST /tokenize and /detokenize on the session's real stack agree with
vLLM's own server on the same model: the same token ids, counts, token
strings, max_model_len and text, for prompts and for conversations through
the chat template.

vLLM's server here is its engine-less one (`vllm launch render`,
harness/vllm_server.py): vLLM's /tokenize and /detokenize handlers
(ServingTokenization) over the same tokenizer and chat template as
`vllm serve`, without loading weights or starting an engine core, ready in
a third of the time (on this machine, loaded: 43 s against `vllm serve`'s
79 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.stacks import CONTEXT, MODEL, Stack
from harness.vllm_server import VllmServer, neuron_engine_args, running_vllm

CONVERSATION = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "Capital of France?"},
]
TOKENIZE_CASES: list[dict[str, Any]] = [
    {"prompt": "Hello, world!"},
    {"prompt": "Hello, world!", "add_special_tokens": False, "return_token_strs": True},
    {"prompt": "héllo 世界 🙂", "return_token_strs": True},
    {"messages": CONVERSATION},
    {"messages": CONVERSATION, "add_generation_prompt": False, "add_special_tokens": True},
    {
        "messages": [*CONVERSATION, {"role": "assistant", "content": "Par"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
        "return_token_strs": True,
    },
]


@pytest.fixture(scope="module")
def vllm(logs_dir: Path) -> Iterator[VllmServer]:
    """vLLM's renderer on the stack's model, with the stack's context length."""
    engine = neuron_engine_args(MODEL)
    kwargs = engine.kwargs
    flags = ["--model", str(kwargs["model"]), "--served-model-name", MODEL]
    flags += ["--dtype", str(kwargs["dtype"]), "--max-model-len", str(CONTEXT)]
    with running_vllm(flags, engine.env, logs_dir / "tokenize-vllm.log", renderer=True) as server:
        yield server


def _both(stack: Stack, vllm: VllmServer, path: str, body: dict[str, Any]) -> list[Any]:
    answers = []
    for base_url in (stack.base_url, vllm.base_url):
        answer = httpx.post(base_url + path, json={"model": MODEL, **body}, timeout=60)
        assert answer.status_code == 200, (base_url, body, answer.text)
        answers.append(answer.json())
    return answers


@pytest.mark.parametrize("case", TOKENIZE_CASES, ids=range(len(TOKENIZE_CASES)))
def test_tokenize_agrees_with_vllms_server(
    stack: Stack, vllm: VllmServer, case: dict[str, Any]
) -> None:
    ours, theirs = _both(stack, vllm, "/tokenize", case)
    assert ours == theirs
    assert ours["count"] == len(ours["tokens"]) > 0 and ours["max_model_len"] == CONTEXT


def test_detokenize_agrees_with_vllms_server(stack: Stack, vllm: VllmServer) -> None:
    for case in TOKENIZE_CASES:
        [tokenized, _] = _both(stack, vllm, "/tokenize", case)
        ours, theirs = _both(stack, vllm, "/detokenize", {"tokens": tokenized["tokens"]})
        assert ours == theirs
        if "prompt" in case and case.get("add_special_tokens") is False:
            assert ours["prompt"] == case["prompt"]


def test_refusals_come_in_openais_envelope(stack: Stack) -> None:
    unknown = httpx.post(stack.base_url + "/tokenize", json={"model": "nope", "prompt": "a"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    huge = httpx.post(
        stack.base_url + "/detokenize", json={"model": MODEL, "tokens": [10**12]}, timeout=30
    )
    assert huge.status_code == 400
    assert huge.json()["error"]["param"] == "tokens"
