"""How one choice's text becomes deltas, per tool mode and with reasoning.
Pure logic: no vLLM needed (the vLLM parsers are injected as callables)."""

from __future__ import annotations

import json

from neuron.engine.base import FinishReason, ToolChoiceMode
from neuron.engine.vllm.shaping import ChoiceShaper, ParsedCalls

STOP, LENGTH = FinishReason.STOP, FinishReason.LENGTH


def test_plain_text_passes_through() -> None:
    shaper = ChoiceShaper(1, None, "", None)
    assert shaper.feed("Hel", [1], (), None).text == "Hel"  # type: ignore[union-attr]
    assert shaper.feed("", [], (), None) is None
    last = shaper.feed("lo", [2], (), STOP)
    assert last is not None and last.index == 1 and last.finish_reason is STOP


def test_named_call_streams_arguments() -> None:
    shaper = ChoiceShaper(0, ToolChoiceMode.NAMED, "get_weather", None)
    first = shaper.feed('{"city":', [1], (), None)
    assert first is not None and first.text == ""
    call = first.tool_calls[0]
    assert call.id.startswith("call_") and call.name == "get_weather"
    assert call.arguments == '{"city":'
    second = shaper.feed(' "Paris"}', [2], (), None)
    assert second is not None
    assert (second.tool_calls[0].id, second.tool_calls[0].arguments) == ("", ' "Paris"}')
    last = shaper.feed("", [], (), STOP)
    assert last is not None and last.finish_reason is STOP and not last.tool_calls


def test_required_calls_are_parsed_when_the_choice_ends() -> None:
    shaper = ChoiceShaper(0, ToolChoiceMode.REQUIRED, "", None)
    text = json.dumps([{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {}}])
    assert shaper.feed(text[:10], [1], (), None) is None
    last = shaper.feed(text[10:], [2], (), STOP)
    assert last is not None and last.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.index, c.name, json.loads(c.arguments)) for c in last.tool_calls] == [
        (0, "a", {"x": 1}),
        (1, "b", {}),
    ]
    assert len({c.id for c in last.tool_calls}) == 2


def test_truncated_required_output_comes_back_as_text() -> None:
    shaper = ChoiceShaper(0, ToolChoiceMode.REQUIRED, "", None)
    last = shaper.feed('[{"name": "a", "param', [1], (), LENGTH)
    assert last is not None and last.finish_reason is LENGTH
    assert last.text == '[{"name": "a", "param' and not last.tool_calls


def test_auto_uses_the_models_parser() -> None:
    def parser(text: str) -> ParsedCalls | None:
        if "<tool_call>" not in text:
            return None
        return ParsedCalls(content="Sure. ", calls=[("lookup", '{"q": "x"}')])

    called = ChoiceShaper(0, ToolChoiceMode.AUTO, "", parser)
    assert called.feed("Sure. <tool_call>...", [1], (), None) is None
    last = called.feed("</tool_call>", [2], (), STOP)
    assert last is not None and last.finish_reason is FinishReason.TOOL_CALLS
    assert last.text == "Sure. " and last.tool_calls[0].name == "lookup"

    plain = ChoiceShaper(0, ToolChoiceMode.AUTO, "", parser)
    last = plain.feed("Just words.", [1], (), STOP)
    assert last is not None and last.text == "Just words." and last.finish_reason is STOP


def test_reasoning_is_split_from_the_answer() -> None:
    # Stands in for a vLLM reasoning parser: text before "</think>" is thought.
    state = {"done": False}

    def split(text: str, ids: list[int]) -> tuple[str, str]:
        if state["done"]:
            return "", text
        if "</think>" in text:
            state["done"] = True
            thought, answer = text.split("</think>", 1)
            return thought, answer
        return text, ""

    shaper = ChoiceShaper(0, None, "", None, split)
    first = shaper.feed("Hmm, France", [1], (), None)
    assert first is not None and (first.reasoning, first.text) == ("Hmm, France", "")
    second = shaper.feed(".</think>Paris", [2], (), None)
    assert second is not None and (second.reasoning, second.text) == (".", "Paris")
    last = shaper.feed("!", [3], (), STOP)
    assert last is not None and (last.reasoning, last.text, last.finish_reason) == ("", "!", STOP)
