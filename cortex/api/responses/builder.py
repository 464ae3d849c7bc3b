"""Building a response from the neuron's stream (engine output → output
items), as the sequence of typed Responses API events and the final response
object.

The same builder serves streamed, non-streamed and background requests, and
ends every one of them: a normal end (`finish`), a failure (`fail`), a
cancel, and a response found running after a restart (`resume` rebuilds the
builder from its stored record, then it fails like any other). Sequence
numbers and SSE framing are added by the caller.

What the request asked of the output is honoured here: token logprobs on
output_text parts and text deltas (present when the neuron sends them, that
is when the request included "message.output_text.logprobs"), and
`max_tool_calls` (calls past it are dropped). `completed_at` is set when a
response completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from axon.v1 import neuron_pb2 as pb
from cortex.api.choices import logprobs_out
from cortex.api.responses import calls
from cortex.api.responses.events import (
    ContentPart,
    Json,
    OutputItem,
    OutputTextDelta,
    OutputTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    ResponseEvent,
    ResponseLifecycle,
)
from cortex.api.responses.items import new_id
from cortex.api.tools import CallNaming
from cortex.store.compact import DELTAS

# The keys of the response object the builder owns; the rest echo the request.
_OWN = (
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "error",
    "incomplete_details",
    "output",
    "usage",
)


def _done(output_index: int, item: Json) -> OutputItem:
    return OutputItem(type="response.output_item.done", output_index=output_index, item=item)


@dataclass
class _Call:
    output_index: int
    item: Json
    arguments: list[str] = field(default_factory=list)


def _logprobs(entries: Sequence[pb.TokenLogprob]) -> list[Json]:
    """The Responses spelling of token logprobs, which is chat's."""
    return [entry.model_dump() for entry in logprobs_out(list(entries))]


class ResponseBuilder:
    def __init__(
        self,
        response_id: str,
        created_at: int,
        fields: dict[str, Any],
        *,
        max_tool_calls: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.response_id = response_id
        self.created_at = created_at
        self.completed_at: int | None = None
        self.fields = fields
        self._clock = clock
        self._max_tool_calls = max_tool_calls
        self._call_count = 0  # function calls opened, over the whole response
        self._dropped: set[int] = set()  # the neuron's indexes of dropped calls
        self.output: list[Json] = []
        self.usage: Json | None = None
        self.status = "in_progress"
        self.error: dict[str, str] | None = None
        self.incomplete: dict[str, str] | None = None
        self._message: Json | None = None
        self._text: list[str] = []
        self._logprobs: list[Json] = []  # of the open message's text
        # Logprobs of tokens that made no text yet (a character split across
        # tokens): they go with the next text delta.
        self._pending: list[pb.TokenLogprob] = []
        self._reasoning: Json | None = None
        self._thought: list[str] = []
        self._calls: dict[int, _Call] = {}
        # How the request's tools are named in call items (namespaces, custom tools).
        self._naming = CallNaming.from_echo(fields)

    @classmethod
    def resume(cls, response: Json, events: list[Json]) -> ResponseBuilder:
        """The builder of a stored response, with the items it left open
        open again (their text taken from the stored deltas), so that it can
        be ended like a running one."""
        fields = {k: v for k, v in response.items() if k not in _OWN}
        builder = cls(
            response["id"],
            response["created_at"],
            fields,
            max_tool_calls=response.get("max_tool_calls"),
        )
        builder.completed_at = response.get("completed_at")
        builder.status = response.get("status", "in_progress")
        builder.usage = response.get("usage")
        builder.incomplete = response.get("incomplete_details")
        builder.output = [dict(item) for item in response.get("output", [])]
        done = {e["item"]["id"] for e in events if e["type"] == "response.output_item.done"}
        deltas: dict[str, list[str]] = {}
        logprobs: dict[str, list[Json]] = {}
        for e in events:
            if e["type"] in DELTAS:
                deltas.setdefault(e["item_id"], []).append(e["delta"])
                logprobs.setdefault(e["item_id"], []).extend(e.get("logprobs", []))
        builder._call_count = sum(
            item["type"] in ("function_call", calls.CUSTOM) for item in builder.output
        )
        for index, item in enumerate(builder.output):
            if item["id"] in done:
                continue
            pieces = deltas.get(item["id"], [])
            if item["type"] == "message":
                builder._message, builder._text = item, pieces
                builder._logprobs = logprobs.get(item["id"], [])
            elif item["type"] == "reasoning":
                builder._reasoning, builder._thought = item, pieces
            elif item["type"] in ("function_call", calls.CUSTOM):
                builder._calls[index] = _Call(index, item, pieces)
        return builder

    def snapshot(self) -> Json:
        """The response object as it stands."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "status": self.status,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "output": list(self.output),
            "usage": self.usage,
            **self.fields,
        }

    def _lifecycle(self, kind: str) -> ResponseLifecycle:
        return ResponseLifecycle(type=kind, response=self.snapshot())

    def start(self) -> list[ResponseEvent]:
        return [self._lifecycle("response.created"), self._lifecycle("response.in_progress")]

    def feed(self, message: pb.GenerateResponse) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        for delta in message.choices:
            if delta.reasoning:
                events += self._reasoning_delta(delta.reasoning)
            if delta.text:
                events += self._text_delta(delta.text, delta.logprobs)
            elif delta.logprobs and not (delta.reasoning or delta.tool_calls):
                self._pending.extend(delta.logprobs)
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

    def finish(self) -> list[ResponseEvent]:
        """The end of a generation that ended normally: anything still open
        (a stream that stopped without a finish reason) is closed first."""
        events = self._close_all()
        self.status = "incomplete" if self.incomplete else "completed"
        if self.status == "completed":
            self.completed_at = int(self._clock())
        return [*events, self._lifecycle(f"response.{self.status}")]

    def cancel(self) -> None:
        self._close_all(status="incomplete")
        self.status = "cancelled"

    def fail(self, code: str, message: str) -> list[ResponseEvent]:
        """Close what is open (as incomplete) and end with response.failed."""
        self.status = "failed"
        self.error = {"code": code, "message": message}
        events = self._close_all(status="incomplete")
        return [*events, self._lifecycle("response.failed")]

    def _open(self, item: Json) -> OutputItem:
        """Add `item` to the output: its output_item.added event."""
        self.output.append(item)
        return OutputItem(
            type="response.output_item.added", output_index=len(self.output) - 1, item=dict(item)
        )

    def _reasoning_delta(self, text: str) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        if self._reasoning is None:
            self._reasoning = {"id": new_id("rs"), "type": "reasoning", "summary": []}
            self._thought = []
            events.append(self._open(self._reasoning))
        self._thought.append(text)
        index = self.output.index(self._reasoning)
        events.append(
            ReasoningTextDelta(item_id=self._reasoning["id"], output_index=index, delta=text)
        )
        return events

    def _close_reasoning(self) -> list[ResponseEvent]:
        if self._reasoning is None:
            return []
        item, self._reasoning = self._reasoning, None
        index = self.output.index(item)
        text = "".join(self._thought)
        item["content"] = [{"type": "reasoning_text", "text": text}]
        return [
            ReasoningTextDone(item_id=item["id"], output_index=index, text=text),
            _done(output_index=index, item=dict(item)),
        ]

    def _text_delta(self, text: str, logprobs: Sequence[pb.TokenLogprob]) -> list[ResponseEvent]:
        events: list[ResponseEvent] = self._close_reasoning()
        if self._message is None:
            self._message = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            self._text, self._logprobs = [], []
            added = self._open(self._message)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events += [
                added,
                ContentPart(
                    type="response.content_part.added",
                    item_id=self._message["id"],
                    output_index=added.output_index,
                    part=part,
                ),
            ]
        self._text.append(text)
        entries = _logprobs([*self._pending, *logprobs])
        self._pending.clear()
        self._logprobs += entries
        index = self.output.index(self._message)
        events.append(
            OutputTextDelta(
                item_id=self._message["id"], output_index=index, delta=text, logprobs=entries
            )
        )
        return events

    def _call_delta(self, call: pb.ToolCallDelta) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        if call.index in self._dropped:
            return events
        state = self._calls.get(call.index)
        if state is None:
            if self._max_tool_calls is not None and self._call_count >= self._max_tool_calls:
                # Past max_tool_calls the call is dropped, not the generation
                # stopped: as OpenAI documents it, further calls are ignored,
                # and the calls already made (and any text) stay whole; the
                # response still completes normally.
                self._dropped.add(call.index)
                return events
            self._call_count += 1
            events += self._close_reasoning()
            events += self._close_message()
            # A new call means the model has finished the one before it:
            # close it now rather than when the whole response ends.
            events += self._close_calls()
            item = calls.open_item(self._naming, call)
            added = self._open(item)
            state = self._calls[call.index] = _Call(added.output_index, item)
            events.append(added)
        if call.arguments:
            state.arguments.append(call.arguments)
            events += calls.delta_events(
                self._naming, state.item, state.output_index, call.arguments
            )
        return events

    def _close_message(self, status: str = "completed") -> list[ResponseEvent]:
        if self._message is None:
            return []
        message, self._message = self._message, None
        index = self.output.index(message)
        text = "".join(self._text)
        logprobs = list(self._logprobs)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
        message["content"] = [part]
        message["status"] = status
        return [
            OutputTextDone(item_id=message["id"], output_index=index, text=text, logprobs=logprobs),
            ContentPart(
                type="response.content_part.done",
                item_id=message["id"],
                output_index=index,
                part=part,
            ),
            _done(output_index=index, item=dict(message)),
        ]

    def _close_all(self, status: str = "completed") -> list[ResponseEvent]:
        return self._close_reasoning() + self._close_message(status) + self._close_calls(status)

    def _close_calls(self, status: str = "completed") -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        for state in sorted(self._calls.values(), key=lambda c: c.output_index):
            events += calls.close_events(
                self._naming, state.item, state.output_index, state.arguments, status
            )
            events.append(_done(output_index=state.output_index, item=dict(state.item)))
        self._calls.clear()
        return events
