"""Building a response from the neuron's stream, as the sequence of
Responses API events and the final response object.

The same builder serves streamed and non-streamed requests, so that both end
with the same object. Events are (type, payload) pairs; sequence numbers and
SSE framing are added by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cortex.api.responses.items import new_id
from neuraxis.core.v1 import neuron_pb2 as pb

Event = tuple[str, dict[str, Any]]


@dataclass
class _Call:
    output_index: int
    item: dict[str, Any]
    arguments: list[str] = field(default_factory=list)


class ResponseBuilder:
    def __init__(self, response_id: str, created_at: int, fields: dict[str, Any]) -> None:
        self.response_id = response_id
        self.created_at = created_at
        self.fields = fields
        self.output: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None
        self.status = "in_progress"
        self.error: dict[str, str] | None = None
        self.incomplete: dict[str, str] | None = None
        self._message: dict[str, Any] | None = None
        self._text: list[str] = []
        self._reasoning: dict[str, Any] | None = None
        self._thought: list[str] = []
        self._calls: dict[int, _Call] = {}

    def snapshot(self) -> dict[str, Any]:
        """The response object as it stands."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "output": list(self.output),
            "usage": self.usage,
            **self.fields,
        }

    def start(self) -> list[Event]:
        return [
            ("response.created", {"response": self.snapshot()}),
            ("response.in_progress", {"response": self.snapshot()}),
        ]

    def feed(self, message: pb.GenerateResponse) -> list[Event]:
        events: list[Event] = []
        for delta in message.choices:
            if delta.reasoning:
                events += self._reasoning_delta(delta.reasoning)
            if delta.text:
                events += self._text_delta(delta.text)
            for call in delta.tool_calls:
                events += self._call_delta(call)
            if delta.finish_reason:
                events += self._close_all()
                if delta.finish_reason == pb.FINISH_REASON_LENGTH:
                    self.incomplete = {"reason": "max_output_tokens"}
        if message.HasField("usage"):
            u = message.usage
            self.usage = {
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {
                    "cached_tokens": u.cached_prompt_tokens,
                    "cache_write_tokens": 0,
                },
                "output_tokens": u.completion_tokens,
                # The engine counts tokens, not which of them were thoughts.
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.prompt_tokens + u.completion_tokens,
            }
        return events

    def finish(self) -> list[Event]:
        """The end of a generation that ended normally: anything still open
        (a stream that stopped without a finish reason) is closed first."""
        events = self._close_all()
        self.status = "incomplete" if self.incomplete else "completed"
        return [*events, (f"response.{self.status}", {"response": self.snapshot()})]

    def cancel(self) -> None:
        self._close_all(status="incomplete")
        self.status = "cancelled"

    def fail(self, code: str, message: str) -> list[Event]:
        """Close what is open (as incomplete) and end with response.failed."""
        self.status = "failed"
        self.error = {"code": code, "message": message}
        events = self._close_all(status="incomplete")
        return [*events, ("response.failed", {"response": self.snapshot()})]

    def _reasoning_delta(self, text: str) -> list[Event]:
        events: list[Event] = []
        if self._reasoning is None:
            self._reasoning = {"id": new_id("rs"), "type": "reasoning", "summary": []}
            self._thought = []
            self.output.append(self._reasoning)
            index = len(self.output) - 1
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": index, "item": dict(self._reasoning)},
                )
            )
        self._thought.append(text)
        index = self.output.index(self._reasoning)
        payload = {"item_id": self._reasoning["id"], "output_index": index, "content_index": 0}
        events.append(("response.reasoning_text.delta", {**payload, "delta": text}))
        return events

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning is None:
            return []
        item, self._reasoning = self._reasoning, None
        index = self.output.index(item)
        text = "".join(self._thought)
        item["content"] = [{"type": "reasoning_text", "text": text}]
        base = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [
            ("response.reasoning_text.done", {**base, "text": text}),
            ("response.output_item.done", {"output_index": index, "item": dict(item)}),
        ]

    def _text_delta(self, text: str) -> list[Event]:
        events: list[Event] = self._close_reasoning()
        if self._message is None:
            self._message = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            self._text = []
            self.output.append(self._message)
            index = len(self.output) - 1
            events.append(
                ("response.output_item.added", {"output_index": index, "item": dict(self._message)})
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                (
                    "response.content_part.added",
                    {
                        "item_id": self._message["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": part,
                    },
                )
            )
        self._text.append(text)
        events.append(
            (
                "response.output_text.delta",
                {
                    "item_id": self._message["id"],
                    "output_index": self.output.index(self._message),
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                },
            )
        )
        return events

    def _call_delta(self, call: pb.ToolCallDelta) -> list[Event]:
        events: list[Event] = []
        state = self._calls.get(call.index)
        if state is None:
            events += self._close_reasoning()
            events += self._close_message()
            item = {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": call.id or new_id("call"),
                "name": call.name,
                "arguments": "",
                "status": "in_progress",
            }
            self.output.append(item)
            state = self._calls[call.index] = _Call(len(self.output) - 1, item)
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": state.output_index, "item": dict(item)},
                )
            )
        if call.arguments:
            state.arguments.append(call.arguments)
            events.append(
                (
                    "response.function_call_arguments.delta",
                    {
                        "item_id": state.item["id"],
                        "output_index": state.output_index,
                        "delta": call.arguments,
                    },
                )
            )
        return events

    def _close_message(self, status: str = "completed") -> list[Event]:
        if self._message is None:
            return []
        message, self._message = self._message, None
        index = self.output.index(message)
        text = "".join(self._text)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        message["content"] = [part]
        message["status"] = status
        base = {"item_id": message["id"], "output_index": index, "content_index": 0}
        return [
            ("response.output_text.done", {**base, "text": text, "logprobs": []}),
            ("response.content_part.done", {**base, "part": part}),
            ("response.output_item.done", {"output_index": index, "item": dict(message)}),
        ]

    def _close_all(self, status: str = "completed") -> list[Event]:
        events = self._close_reasoning() + self._close_message(status)
        for state in sorted(self._calls.values(), key=lambda c: c.output_index):
            arguments = "".join(state.arguments)
            state.item["arguments"] = arguments
            state.item["status"] = status
            events.append(
                (
                    "response.function_call_arguments.done",
                    {
                        "item_id": state.item["id"],
                        "output_index": state.output_index,
                        "arguments": arguments,
                        "name": state.item["name"],
                    },
                )
            )
            events.append(
                (
                    "response.output_item.done",
                    {"output_index": state.output_index, "item": dict(state.item)},
                )
            )
        self._calls.clear()
        return events
