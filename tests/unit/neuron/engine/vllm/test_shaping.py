"""How one choice's text becomes deltas, per tool mode and with reasoning.
Pure logic: no vLLM needed (the vLLM parsers are injected: a callable for
the parse-once path, a scripted ToolStream for the streaming one; the real
hermes parser behind ToolStream is tested in test_tool_parsers.py)."""

from __future__ import annotations

import json

from neuron.engine.base import ChoiceDelta, FinishReason, ToolChoiceMode
from neuron.engine.vllm.shaping import (
    CallPiece,
    ChoiceShaper,
    ParsedCalls,
    ParsedPiece,
    ToolStream,
)

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


class ScriptedStream(ToolStream):
    """Stands in for a streaming vLLM tool parser: step k of the choice gets
    the k-th scripted piece, whatever the text; `unstreamed` gives the
    scripted tail at the end."""

    def __init__(self, pieces: list[ParsedPiece], tail: tuple[CallPiece, ...] = ()) -> None:
        self._pieces = list(pieces)
        self._tail = tail
        self.fed: list[str] = []

    def feed(self, text: str, token_ids: list[int]) -> ParsedPiece:
        self.fed.append(text)
        return self._pieces.pop(0)

    def unstreamed(self) -> tuple[CallPiece, ...]:
        return self._tail


Step = tuple[str, ParsedPiece]


def _run(
    index: int, steps: list[Step], tail: tuple[CallPiece, ...] = ()
) -> list[ChoiceDelta | None]:
    """Feed the steps' texts (the last one ends the choice with "stop") to an
    auto shaper whose parser answers each with the step's piece."""
    stream = ScriptedStream([piece for _, piece in steps], tail)
    shaper = ChoiceShaper(index, ToolChoiceMode.AUTO, "", stream)
    out = [
        shaper.feed(text, [i], (), STOP if i == len(steps) - 1 else None)
        for i, (text, _) in enumerate(steps)
    ]
    assert stream.fed == [text for text, _ in steps]
    return out


def _arguments(deltas: list[ChoiceDelta | None], call: int) -> str:
    return "".join(
        c.arguments for d in deltas if d is not None for c in d.tool_calls if c.index == call
    )


def test_auto_streams_text_then_the_calls_name_then_its_argument_fragments() -> None:
    text, held, named, first, second, last = _run(
        3,
        [
            ("Let me look. ", ParsedPiece(content="Let me look. ")),
            ('<tool_call>{"', ParsedPiece()),  # nothing sure yet
            ('name": "lookup", ', ParsedPiece(calls=(CallPiece(0, name="lookup"),))),
            ('"arguments": {"q": ', ParsedPiece(calls=(CallPiece(0, arguments='{"q": '),))),
            ('"x"}}', ParsedPiece(calls=(CallPiece(0, arguments='"x"}'),))),
            ("</tool_call>", ParsedPiece()),
        ],
    )
    assert text == ChoiceDelta(3, text="Let me look. ")
    assert held is None
    assert named is not None and not named.text and len(named.tool_calls) == 1
    call = named.tool_calls[0]
    assert (call.index, call.name, call.arguments) == (0, "lookup", "")
    assert call.id.startswith("call_")
    for fragment in (first, second):
        assert fragment is not None and len(fragment.tool_calls) == 1
        assert (fragment.tool_calls[0].id, fragment.tool_calls[0].name) == ("", "")
    assert _arguments([first, second], 0) == '{"q": "x"}'
    assert last == ChoiceDelta(3, finish_reason=FinishReason.TOOL_CALLS)


def test_auto_streams_two_parallel_calls_each_named_once() -> None:
    deltas = _run(
        0,
        [
            ("a", ParsedPiece(calls=(CallPiece(0, name="a"), CallPiece(0, arguments="{}")))),
            (
                "b",
                ParsedPiece(
                    calls=(
                        CallPiece(1, name="b"),
                        CallPiece(1, arguments='{"k":'),
                    )
                ),
            ),
            ("c", ParsedPiece(calls=(CallPiece(1, arguments=" 2}"),))),
        ],
    )
    calls = [c for d in deltas if d is not None for c in d.tool_calls]
    # A call's name and the arguments that came with it make one delta.
    assert [(c.index, c.name, c.arguments) for c in calls] == [
        (0, "a", "{}"),
        (1, "b", '{"k":'),
        (1, "", " 2}"),
    ]
    assert calls[0].id and calls[1].id and calls[0].id != calls[1].id and not calls[2].id
    assert deltas[-1] is not None and deltas[-1].finish_reason is FinishReason.TOOL_CALLS


def test_auto_gives_arguments_read_before_the_name_with_the_name() -> None:
    first, second = _run(
        0,
        [
            ("x", ParsedPiece(calls=(CallPiece(0, arguments='{"a": 1}'),))),
            ("y", ParsedPiece(calls=(CallPiece(0, name="f"),))),
        ],
    )
    assert first is None
    assert second is not None and len(second.tool_calls) == 1
    assert (second.tool_calls[0].name, second.tool_calls[0].arguments) == ("f", '{"a": 1}')


def test_auto_ends_with_the_arguments_the_parser_still_held() -> None:
    deltas = _run(
        0,
        [
            (
                "x",
                ParsedPiece(
                    calls=(
                        CallPiece(0, name="f"),
                        CallPiece(0, arguments='{"a"'),
                    )
                ),
            ),
            ("y", ParsedPiece()),
        ],
        tail=(CallPiece(0, arguments=": 1}"),),
    )
    assert _arguments(deltas, 0) == '{"a": 1}'
    last = deltas[-1]
    assert last is not None and last.finish_reason is FinishReason.TOOL_CALLS
    assert [c.arguments for c in last.tool_calls] == [": 1}"]


def test_auto_without_a_call_gives_back_what_the_parser_held_as_text() -> None:
    # The parser holds "<tool" back as the possible start of a call; the
    # answer ends there, so it was text after all.
    deltas = _run(
        0,
        [
            ("Use ", ParsedPiece(content="Use ")),
            ("<tool", ParsedPiece()),
            ("", ParsedPiece()),
        ],
    )
    assert "".join(d.text for d in deltas if d is not None) == "Use <tool"
    assert deltas[-1] == ChoiceDelta(0, text="<tool", finish_reason=STOP)


def test_auto_cut_short_by_length_says_length() -> None:
    stream = ScriptedStream([ParsedPiece(calls=(CallPiece(0, name="f", arguments='{"a'),))])
    shaper = ChoiceShaper(0, ToolChoiceMode.AUTO, "", stream)
    last = shaper.feed("...", [1], (), LENGTH)
    assert last is not None and last.finish_reason is LENGTH
    assert [(c.name, c.arguments) for c in last.tool_calls] == [("f", '{"a')]
