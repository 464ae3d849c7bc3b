"""Shaping one choice's generated text into deltas, by tool mode.

- no tools (or tool_choice none): text passes through as it comes;
- a named function: the constrained output *is* the arguments JSON, streamed
  as argument fragments of one call whose first delta carries id and name;
- required: the constrained output is a JSON array of {name, parameters},
  parsed when the choice finishes into one call per element;
- auto: the text goes through the model's tool parser (one of vLLM's) as it
  comes: text before a call passes as text, each call's id and name come
  as soon as the parser sees the name, its arguments as fragments after.
  A parser without streaming support gets the old treatment: the text is
  held until the choice finishes and parsed once.

What is here is pure logic over text pieces: the vLLM parsers themselves are
adapted in tool_parsers.py, so these rules are tested without vLLM.
"""

from __future__ import annotations

import abc
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from neuron.engine.base import (
    ChoiceDelta,
    FinishReason,
    TokenLogprob,
    ToolCallDelta,
    ToolChoiceMode,
)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ParsedCalls:
    content: str
    calls: list[tuple[str, str]]  # (name, arguments JSON)


# Given the whole text of a choice, the model's tool parser says which calls
# it made (None: the model answered in text).
AutoParser = Callable[[str], ParsedCalls | None]


@dataclass(frozen=True)
class CallPiece:
    """What a streaming tool parser saw of one call in one step: its name
    (once, when the parser has read it) and/or a fragment of its arguments."""

    index: int  # the parser's numbering of the calls in this choice
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class ParsedPiece:
    """What a streaming tool parser made of one step's text: answer text
    (text outside calls) and call pieces."""

    content: str = ""
    calls: tuple[CallPiece, ...] = ()


class ToolStream(abc.ABC):
    """A model's tool parser read incrementally, one step's text at a time;
    one instance per choice (parsers keep state)."""

    @abc.abstractmethod
    def feed(self, text: str, token_ids: list[int]) -> ParsedPiece:
        """The new text and its token ids: what became clear with them."""

    @abc.abstractmethod
    def unstreamed(self) -> tuple[CallPiece, ...]:
        """At the end: argument text the parser has read but not yet given
        out (a parser may hold the tail of a call until it is sure of it)."""


# Given a new piece of text and its token ids, the model's reasoning parser
# says which part is reasoning and which is the answer: (reasoning, content).
ReasoningSplit = Callable[[str, list[int]], tuple[str, str]]


class ChoiceShaper:
    def __init__(
        self,
        index: int,
        mode: ToolChoiceMode | None,
        tool_name: str,
        parser: AutoParser | ToolStream | None,
        reasoning: ReasoningSplit | None = None,
    ) -> None:
        self.index = index
        self._mode = mode  # None: plain text
        self._tool_name = tool_name
        self._parser = parser
        self._stream = (
            _AutoStream(index, parser)
            if mode is ToolChoiceMode.AUTO and isinstance(parser, ToolStream)
            else None
        )
        self._reasoning = reasoning
        self._held: list[str] = []
        self._call_id = ""

    def feed(
        self,
        text: str,
        token_ids: list[int],
        logprobs: tuple[TokenLogprob, ...],
        finish: FinishReason | None,
    ) -> ChoiceDelta | None:
        reasoning = ""
        if self._reasoning is not None:
            reasoning, text = self._reasoning(text, token_ids)
        if self._mode is not None:
            delta = self._with_tools(text, token_ids, finish)
        elif text or logprobs or finish is not None:
            delta = ChoiceDelta(self.index, text=text, logprobs=logprobs, finish_reason=finish)
        else:
            delta = None
        if not reasoning:
            return delta
        if delta is None:
            return ChoiceDelta(self.index, reasoning=reasoning)
        return replace(delta, reasoning=reasoning)

    def _with_tools(
        self, text: str, token_ids: list[int], finish: FinishReason | None
    ) -> ChoiceDelta | None:
        if self._mode is ToolChoiceMode.NAMED:
            return self._named(text, finish)
        if self._stream is not None:
            return self._stream.feed(text, token_ids, finish)
        self._held.append(text)
        if finish is None:
            return None
        whole = "".join(self._held)
        parsed = _parse_required(whole) if self._mode is ToolChoiceMode.REQUIRED else None
        if self._mode is ToolChoiceMode.AUTO and callable(self._parser):
            parsed = self._parser(whole)
        if parsed is None or not parsed.calls:
            # A truncated or plain-text answer: give it back as text.
            return ChoiceDelta(self.index, text=whole, finish_reason=finish)
        calls = tuple(
            ToolCallDelta(index=i, id=new_call_id(), name=name, arguments=arguments)
            for i, (name, arguments) in enumerate(parsed.calls)
        )
        reason = FinishReason.LENGTH if finish is FinishReason.LENGTH else FinishReason.TOOL_CALLS
        return ChoiceDelta(self.index, text=parsed.content, tool_calls=calls, finish_reason=reason)

    def _named(self, text: str, finish: FinishReason | None) -> ChoiceDelta | None:
        calls: tuple[ToolCallDelta, ...] = ()
        if not self._call_id:
            self._call_id = new_call_id()
            calls = (ToolCallDelta(0, id=self._call_id, name=self._tool_name, arguments=text),)
        elif text:
            calls = (ToolCallDelta(0, arguments=text),)
        if not calls and finish is None:
            return None
        # OpenAI ends a forced named call with "stop", not "tool_calls".
        return ChoiceDelta(self.index, tool_calls=calls, finish_reason=finish)


@dataclass
class _Call:
    """One call as given out so far: its index in the choice and id once it
    is named, argument text that came before its name."""

    index: int = -1
    id: str = ""
    early_arguments: list[str] = field(default_factory=list)


class _AutoStream:
    """tool_choice auto through a streaming tool parser, for one choice."""

    def __init__(self, choice: int, parser: ToolStream) -> None:
        self._choice = choice
        self._parser = parser
        self._calls: dict[int, _Call] = {}  # by the parser's index
        self._named = 0
        self._text: list[str] = []  # everything the model wrote
        self._given: list[str] = []  # the answer text given out so far

    def feed(
        self, text: str, token_ids: list[int], finish: FinishReason | None
    ) -> ChoiceDelta | None:
        out: list[ToolCallDelta] = []
        content = ""
        if text or token_ids:
            self._text.append(text)
            piece = self._parser.feed(text, token_ids)
            content = piece.content
            for call in piece.calls:
                self._add(out, call)
        if finish is not None:
            for call in self._parser.unstreamed():
                self._add(out, call)
            if not self._named:
                # No call after all: whatever the parser held back (a
                # "<tool_" that never became a call, a call it could not
                # read) is the model's answer.
                content += self._held_back(content)
            if self._named and finish is FinishReason.STOP:
                finish = FinishReason.TOOL_CALLS
        if content:
            self._given.append(content)
        if not content and not out and finish is None:
            return None
        return ChoiceDelta(self._choice, text=content, tool_calls=tuple(out), finish_reason=finish)

    def _add(self, out: list[ToolCallDelta], piece: CallPiece) -> None:
        call = self._calls.setdefault(piece.index, _Call())
        if not call.id:
            if not piece.name:
                # Our contract: a call's first delta carries its id and name.
                call.early_arguments.append(piece.arguments)
                return
            call.index, call.id = self._named, new_call_id()
            self._named += 1
            arguments = "".join(call.early_arguments) + piece.arguments
            out.append(ToolCallDelta(call.index, id=call.id, name=piece.name, arguments=arguments))
            return
        if not piece.arguments:
            return
        if out and out[-1].index == call.index:
            # Two pieces of the same call in one step: one delta.
            out[-1] = replace(out[-1], arguments=out[-1].arguments + piece.arguments)
            return
        out.append(ToolCallDelta(call.index, arguments=piece.arguments))

    def _held_back(self, content: str) -> str:
        whole, given = "".join(self._text), "".join(self._given) + content
        return whole[len(given) :] if whole.startswith(given) else ""


def _parse_required(text: str) -> ParsedCalls | None:
    try:
        items = json.loads(text)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    calls = [
        (str(item["name"]), json.dumps(item.get("parameters", {})))
        for item in items
        if isinstance(item, dict) and "name" in item
    ]
    return ParsedCalls(content="", calls=calls)


def reasoning_split(reasoning_class: Any, tokenizer: Any) -> ReasoningSplit | None:
    """A split of each streamed delta into (reasoning, content) by the
    model's reasoning parser (its state kept across deltas); None without one."""
    if reasoning_class is None:
        return None
    parser = reasoning_class(tokenizer)
    text: list[str] = []
    ids: list[int] = []

    def split(delta_text: str, delta_ids: list[int]) -> tuple[str, str]:
        previous_text, previous_ids = "".join(text), list(ids)
        text.append(delta_text)
        ids.extend(delta_ids)
        message = parser.extract_reasoning_streaming(
            previous_text, "".join(text), delta_text, previous_ids, list(ids), delta_ids
        )
        if message is None:
            return "", ""
        return message.reasoning or "", message.content or ""

    return split
