"""Shaping one choice's generated text into deltas, by tool mode.

- no tools (or tool_choice none): text passes through as it comes;
- a named function: the constrained output *is* the arguments JSON, streamed
  as argument fragments of one call whose first delta carries id and name;
- required: the constrained output is a JSON array of {name, parameters},
  parsed when the choice finishes into one call per element;
- auto: the text is held until the choice finishes and then given to the
  model's tool parser (one of vLLM's), which says whether it called tools.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

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

# Given a new piece of text and its token ids, the model's reasoning parser
# says which part is reasoning and which is the answer: (reasoning, content).
ReasoningSplit = Callable[[str, list[int]], tuple[str, str]]


class ChoiceShaper:
    def __init__(
        self,
        index: int,
        mode: ToolChoiceMode | None,
        tool_name: str,
        parser: AutoParser | None,
        reasoning: ReasoningSplit | None = None,
    ) -> None:
        self.index = index
        self._mode = mode  # None: plain text
        self._tool_name = tool_name
        self._parser = parser
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
        if self._reasoning is None:
            return self._shape(text, logprobs, finish)
        reasoning, text = self._reasoning(text, token_ids)
        delta = self._shape(text, logprobs, finish)
        if not reasoning:
            return delta
        if delta is None:
            return ChoiceDelta(self.index, reasoning=reasoning)
        return replace(delta, reasoning=reasoning)

    def _shape(
        self, text: str, logprobs: tuple[TokenLogprob, ...], finish: FinishReason | None
    ) -> ChoiceDelta | None:
        if self._mode is None:
            if not text and not logprobs and finish is None:
                return None
            return ChoiceDelta(self.index, text=text, logprobs=logprobs, finish_reason=finish)
        if self._mode is ToolChoiceMode.NAMED:
            return self._named(text, finish)
        self._held.append(text)
        if finish is None:
            return None
        whole = "".join(self._held)
        parsed = _parse_required(whole) if self._mode is ToolChoiceMode.REQUIRED else None
        if self._mode is ToolChoiceMode.AUTO and self._parser is not None:
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
