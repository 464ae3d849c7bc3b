"""Prompt rendering and `truncate_oldest`, with a counting fake tokenizer:
which turns are dropped, and that the work is linear in the number of
messages (tokenizer calls counted, not time)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from neuron.engine.base import (
    EngineRequest,
    Grammar,
    GrammarSyntax,
    Message,
    Sampling,
    Tool,
    ToolChoice,
    ToolChoiceMode,
    ToolKind,
)
from neuron.engine.vllm.prompt import (
    CUSTOM_INPUT_SCHEMA,
    openai_tool,
    render_fitting,
    required_calls_schema,
    sampling_params,
    structured_outputs,
)


class CountingTokenizer:
    """A chat template of "<role> content" lines plus a generation prompt; one
    token per whitespace-separated word. Counts the calls made to it."""

    def __init__(self) -> None:
        self.renders = 0
        self.encodes = 0
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> str:
        self.renders += 1
        lines = [f"<{m['role']}> {m['content']}" for m in messages]
        return "\n".join([*lines, "<assistant>"])

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encodes += 1
        return [self.vocab.setdefault(word, len(self.vocab)) for word in text.split()]

    def words(self, ids: list[int]) -> list[str]:
        names = {i: word for word, i in self.vocab.items()}
        return [names[i] for i in ids]


def _conversation(turns: int, words: int = 9) -> tuple[Message, ...]:
    body = " ".join(["word"] * words)
    chat = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"turn{i} {body}")
        for i in range(turns)
    ]
    return (Message(role="system", content="be brief"), *chat)


def _request(messages: tuple[Message, ...], truncate: bool = True) -> EngineRequest:
    return EngineRequest(
        request_id="r",
        model="m",
        messages=messages,
        sampling=Sampling(max_tokens=10),
        truncate_oldest=truncate,
    )


@pytest.mark.parametrize("turns", [200, 2000])
def test_truncation_renders_a_constant_number_of_times(turns: int) -> None:
    tokenizer = CountingTokenizer()
    # Every turn is 11 tokens; 500 tokens of room keeps ~44 of them.
    render_fitting(tokenizer, _request(_conversation(turns)), limit=510)
    assert tokenizer.renders <= 3
    # One tokenisation per message for the estimate, and one per render.
    assert tokenizer.encodes <= (turns + 1) + tokenizer.renders


def test_truncation_keeps_the_system_message_and_the_newest_turns_that_fit() -> None:
    tokenizer = CountingTokenizer()
    ids = render_fitting(tokenizer, _request(_conversation(2000)), limit=510)
    words = tokenizer.words(ids)
    assert len(ids) <= 500
    assert words[:3] == ["<system>", "be", "brief"]
    kept = [int(w.removeprefix("turn")) for w in words if w.startswith("turn")]
    assert kept == list(range(2000 - len(kept), 2000))
    # 500 tokens of room, 4 for the system line and the generation prompt, 11
    # per turn: 45 fit. The estimate may cost one turn more than needed.
    assert len(kept) in (44, 45)


def test_a_conversation_that_fits_is_rendered_once() -> None:
    tokenizer = CountingTokenizer()
    ids = render_fitting(tokenizer, _request(_conversation(3)), limit=510)
    assert (tokenizer.renders, tokenizer.encodes) == (1, 1)
    assert len(ids) == 3 + 3 * 11 + 1


def test_without_truncate_oldest_nothing_is_dropped() -> None:
    tokenizer = CountingTokenizer()
    ids = render_fitting(tokenizer, _request(_conversation(100), truncate=False), limit=510)
    assert len(ids) == 3 + 100 * 11 + 1


def test_the_last_turn_is_kept_even_when_it_alone_does_not_fit() -> None:
    tokenizer = CountingTokenizer()
    messages = _conversation(3, words=1000)
    ids = render_fitting(tokenizer, _request(messages), limit=510)
    assert len(ids) == 3 + 1002 + 1


CUSTOM = Tool(name="apply_patch", description="Patch files.", kind=ToolKind.CUSTOM)


def test_vllm_sampling_extensions_reach_sampling_params() -> None:
    sampling = Sampling(
        top_k=5,
        min_p=0.05,
        repetition_penalty=1.1,
        min_tokens=3,
        ignore_eos=True,
        stop_token_ids=(7,),
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        spaces_between_special_tokens=False,
        allowed_token_ids=(1, 2),
        bad_words=("darn",),
    )
    params = sampling_params(EngineRequest("r", "m", sampling=sampling), max_tokens=10)
    assert (params.top_k, params.min_p, params.repetition_penalty) == (5, 0.05, 1.1)
    assert (params.min_tokens, params.ignore_eos, params.max_tokens) == (3, True, 10)
    assert params.stop_token_ids == [7] and params.allowed_token_ids == [1, 2]
    assert params.bad_words == ["darn"]
    assert params.include_stop_str_in_output is True
    assert params.skip_special_tokens is False and params.spaces_between_special_tokens is False


def test_unset_extensions_keep_vllms_defaults() -> None:
    from vllm import SamplingParams

    params = sampling_params(EngineRequest("r", "m"), max_tokens=10)
    default = SamplingParams()
    for name in ("min_p", "repetition_penalty", "min_tokens", "ignore_eos", "skip_special_tokens"):
        assert getattr(params, name) == getattr(default, name), name


def test_a_custom_tool_is_offered_as_a_function_of_its_input() -> None:
    assert openai_tool(CUSTOM) == {
        "type": "function",
        "function": {
            "name": "apply_patch",
            "description": "Patch files.",
            "parameters": CUSTOM_INPUT_SCHEMA,
        },
    }


def _forced(tool: Tool) -> EngineRequest:
    return EngineRequest(
        "r", "m", tools=(tool,), tool_choice=ToolChoice(ToolChoiceMode.NAMED, tool.name)
    )


def test_a_forced_custom_tool_is_constrained_by_its_grammar() -> None:
    regex = replace(CUSTOM, grammar=Grammar(GrammarSyntax.REGEX, "[0-9]+"))
    lark = replace(CUSTOM, grammar=Grammar(GrammarSyntax.LARK, 'start: "a"'))
    assert structured_outputs(_forced(regex)).regex == "[0-9]+"
    assert structured_outputs(_forced(lark)).grammar == 'start: "a"'
    # Without a grammar its input is free text.
    assert structured_outputs(_forced(CUSTOM)) is None


def test_required_mode_offers_a_custom_tool_its_input_object() -> None:
    schema = required_calls_schema((CUSTOM,))
    (variant,) = schema["items"]["anyOf"]
    assert variant["properties"]["parameters"] == CUSTOM_INPUT_SCHEMA
