"""vLLM's sampling extensions on chat and legacy completions: accepted as
`vllm serve` accepts them, the refused ones named, unknown arguments still
refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.completions import CompletionRequest

EXTENSIONS: dict[str, Any] = {
    "top_k": 5,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "min_tokens": 2,
    "ignore_eos": True,
    "stop_token_ids": [7, 8],
    "include_stop_str_in_output": True,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "allowed_token_ids": [1, 2, 3],
    "bad_words": ["darn"],
    "use_beam_search": False,
    "length_penalty": 1.0,
}
BODIES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}),
    (CompletionRequest, {"model": "m", "prompt": "Once"}),
]


@pytest.mark.parametrize(("schema", "base"), BODIES)
def test_the_extensions_are_accepted(schema: type[BaseModel], base: dict[str, Any]) -> None:
    body = schema.model_validate({**base, **EXTENSIONS})
    assert body.model_dump(include={"min_p", "bad_words"}) == {"min_p": 0.05, "bad_words": ["darn"]}


@pytest.mark.parametrize(("schema", "base"), BODIES)
@pytest.mark.parametrize("name", ["use_beam_search", "prompt_logprobs", "truncate_prompt_tokens"])
def test_refused_extensions_are_named(
    schema: type[ChatCompletionRequest | CompletionRequest], base: dict[str, Any], name: str
) -> None:
    value = True if name == "use_beam_search" else 3
    assert schema.model_validate({**base, name: value}).unsupported == [name]


@pytest.mark.parametrize(("schema", "base"), BODIES)
@pytest.mark.parametrize(
    "fields",
    [
        {"length_penalty": 2.0},
        {"min_p": 1.5},
        {"stop_token_ids": [-1]},
        {"vllm_xargs": {"a": 1}},
        {"not_an_argument": 1},
    ],
)
def test_bad_or_unknown_arguments_are_refused(
    schema: type[BaseModel], base: dict[str, Any], fields: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        schema.model_validate({**base, **fields})
