"""vLLM's tool parsers (tool_choice auto) behind shaping.py's interfaces.

A parser that can read a choice as it is generated becomes a `ToolStream`
(`extract_tool_calls_streaming`, one parser instance per choice: parsers keep
state); one that cannot (it does not override vLLM's streaming method) is
read once at the end (`extract_tool_calls`), the old hold-and-parse path.

The rules for turning what a parser says into deltas (ids, the finish
reason, text the parser held back) are shaping.py's, not this module's.
"""

from __future__ import annotations

from typing import Any

from neuron.engine.base import Tool
from neuron.engine.vllm.prompt import openai_tool
from neuron.engine.vllm.shaping import AutoParser, CallPiece, ParsedCalls, ParsedPiece, ToolStream


def auto_tools(
    parser_class: Any, tokenizer: Any, model: str, tools: tuple[Tool, ...]
) -> AutoParser | ToolStream:
    """The model's tool parser for one choice of a tool_choice auto request."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParser

    # The parsers take vLLM's own request (they read its tools).
    request = ChatCompletionRequest.model_validate(
        {
            "model": model,
            "messages": [{"role": "user", "content": ""}],
            "tools": [openai_tool(t) for t in tools],
            "tool_choice": "auto",
        }
    )
    parser = parser_class(tokenizer, request.tools)
    # A parser without streaming support keeps the base class's method,
    # which only raises NotImplementedError.
    if parser_class.extract_tool_calls_streaming is ToolParser.extract_tool_calls_streaming:
        return _held(parser, request)
    return VllmToolStream(parser, request)


def _held(parser: Any, request: Any) -> AutoParser:
    def parse(text: str) -> ParsedCalls | None:
        info = parser.extract_tool_calls(text, request)
        if not info.tools_called:
            return None
        calls = [(c.function.name, c.function.arguments) for c in info.tool_calls]
        return ParsedCalls(content=info.content or "", calls=calls)

    return parse


class VllmToolStream(ToolStream):
    """One choice read by a vLLM parser's `extract_tool_calls_streaming`,
    driven the way vLLM's own chat server drives it (previous and current
    text and token ids at each step)."""

    def __init__(self, parser: Any, request: Any) -> None:
        self._parser = parser
        self._request = request
        self._text = ""
        self._ids: list[int] = []

    def feed(self, text: str, token_ids: list[int]) -> ParsedPiece:
        previous_text, previous_ids = self._text, self._ids
        self._text = previous_text + text
        self._ids = previous_ids + token_ids
        message = self._parser.extract_tool_calls_streaming(
            previous_text,
            self._text,
            text,
            previous_ids,
            self._ids,
            token_ids,
            self._request,
        )
        if message is None:
            return ParsedPiece()
        calls = tuple(
            CallPiece(
                index=c.index,
                name=(c.function.name or "") if c.function else "",
                arguments=(c.function.arguments or "") if c.function else "",
            )
            for c in message.tool_calls or ()
        )
        return ParsedPiece(content=message.content or "", calls=calls)

    def unstreamed(self) -> tuple[CallPiece, ...]:
        # vLLM's own end-of-stream flush (ToolParser.get_remaining_unstreamed_args):
        # the last call's arguments as parsed, less what was streamed of them.
        # Only the last call: a parser moves on to the next call only once it
        # has given out the previous one whole.
        remaining: str = self._parser.get_remaining_unstreamed_args()
        if not remaining:
            return ()
        return (CallPiece(index=len(self._parser.prev_tool_call_arr) - 1, arguments=remaining),)
