"""vLLM's real hermes tool parser (the bundled SmolLM2's) behind shaping's
interfaces, fed a scripted model output a few characters at a time: the
calls come out while they are written, text before them as text, their
argument fragments adding up to what the parse-once path finds. The hermes
parser reads text only, so no tokenizer or model is loaded."""

from __future__ import annotations

import json
from typing import Any

from neuron.engine.base import ChoiceDelta, FinishReason, Tool, ToolChoiceMode
from neuron.engine.vllm.shaping import ChoiceShaper, ParsedCalls, ToolStream
from neuron.engine.vllm.tool_parsers import auto_tools

TOOLS = (
    Tool(name="get_weather", parameters={"type": "object", "properties": {"city": {}}}),
    Tool(name="get_time", parameters={"type": "object", "properties": {"zone": {}}}),
)
MIXED = (
    "Let me check that for you. <tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}\n'
    "</tool_call>"
)
PARALLEL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"zone": "Europe/Rome"}}\n</tool_call>'
)


class _Tokenizer:
    """The parsers want a tokenizer; hermes only checks that it has one."""

    def get_vocab(self) -> dict[str, int]:
        return {}


def _hermes() -> Any:
    from vllm.tool_parsers import ToolParserManager

    return ToolParserManager.get_tool_parser("hermes")


def _stream(text: str, size: int = 3) -> list[ChoiceDelta | None]:
    """The choice as the shaper gives it out, fed `size` characters a step
    (a token or so), the last step ending it."""
    parser = auto_tools(_hermes(), _Tokenizer(), "m", TOOLS)
    assert isinstance(parser, ToolStream)
    shaper = ChoiceShaper(0, ToolChoiceMode.AUTO, "", parser)
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    return [
        shaper.feed(piece, [i], (), FinishReason.STOP if i == len(pieces) - 1 else None)
        for i, piece in enumerate(pieces)
    ]


def _parsed_once(text: str) -> ParsedCalls | None:
    parse = auto_tools(_held_hermes(), _Tokenizer(), "m", TOOLS)
    assert callable(parse)
    return parse(text)


def _held_hermes() -> Any:
    """hermes as a parser without streaming support would be."""
    from vllm.tool_parsers import ToolParser

    class _NoStreaming(_hermes()):  # type: ignore[misc]
        extract_tool_calls_streaming = ToolParser.extract_tool_calls_streaming

    return _NoStreaming


def _arguments(deltas: list[ChoiceDelta | None], call: int) -> str:
    return "".join(
        c.arguments for d in deltas if d is not None for c in d.tool_calls if c.index == call
    )


def _first_step(deltas: list[ChoiceDelta | None], call: int) -> int:
    return next(
        i
        for i, d in enumerate(deltas)
        if d and any(c.index == call and c.name for c in d.tool_calls)
    )


def test_text_before_the_call_is_text_and_the_call_streams_as_it_is_written() -> None:
    deltas = _stream(MIXED)
    text = "".join(d.text for d in deltas if d is not None)
    assert text == "Let me check that for you. "
    named = _first_step(deltas, 0)
    argument_steps = [
        i for i, d in enumerate(deltas) if d and any(c.arguments for c in d.tool_calls)
    ]
    # The name goes out before the arguments are written, which go out in
    # several fragments before the choice ends.
    assert named < argument_steps[0] and len(argument_steps) > 3
    assert argument_steps[0] < len(deltas) - 3
    once = _parsed_once(MIXED)
    assert once is not None and once.calls[0][0] == "get_weather"
    assert json.loads(_arguments(deltas, 0)) == json.loads(once.calls[0][1])
    assert once.content == text
    last = deltas[-1]
    assert last is not None and last.finish_reason is FinishReason.TOOL_CALLS


def test_two_parallel_calls_stream_one_after_the_other() -> None:
    deltas = _stream(PARALLEL)
    assert not any(d.text for d in deltas if d is not None)
    calls = [c for d in deltas if d is not None for c in d.tool_calls if c.name]
    assert [(c.index, c.name) for c in calls] == [(0, "get_weather"), (1, "get_time")]
    assert calls[0].id != calls[1].id
    assert _first_step(deltas, 0) < _first_step(deltas, 1) < len(deltas) - 3
    once = _parsed_once(PARALLEL)
    assert once is not None
    assert [json.loads(_arguments(deltas, i)) for i in (0, 1)] == [
        json.loads(arguments) for _, arguments in once.calls
    ]


def test_a_text_answer_with_a_tag_like_ending_comes_back_whole() -> None:
    answer = "Use the tag <tool"
    deltas = _stream(answer, size=4)
    assert "".join(d.text for d in deltas if d is not None) == answer
    assert not any(d.tool_calls for d in deltas if d is not None)
    last = deltas[-1]
    assert last is not None and last.finish_reason is FinishReason.STOP


def test_a_parser_without_streaming_is_read_once_at_the_end() -> None:
    assert _parsed_once("Just words.") is None
    once = _parsed_once(MIXED)
    assert once is not None and [name for name, _ in once.calls] == ["get_weather"]
