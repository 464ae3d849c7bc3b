"""Responses API items: normalising input items for storage, turning a
conversation of items into the internal chat messages, and the response
object's own fields."""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import TypeAdapter

from axon.v1 import neuron_pb2 as pb
from cortex.api.tools import model_name
from cortex.schemas.responses import (
    AnyItem,
    CustomToolCallItem,
    InputItem,
    MessageItem,
    ToolCallItem,
    ToolOutputItem,
)

Item = AnyItem
# The id prefixes of the items OpenAI's API gives ids to.
_ID_PREFIX = {"function_call": "fc", "custom_tool_call": "ctc"}
_ITEMS = TypeAdapter(list[InputItem])


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def normalise(item: Item) -> dict[str, Any]:
    """An input item as it is stored and listed by input_items: with an id,
    and message content always a list of typed parts."""
    if isinstance(item, MessageItem):
        kind = "output_text" if item.role == "assistant" else "input_text"
        parts = (
            [{"type": kind, "text": item.content}]
            if isinstance(item.content, str)
            else [{"type": p.type, "text": p.text} for p in item.content]
        )
        return {
            "id": item.id or new_id("msg"),
            "type": "message",
            "role": item.role,
            "content": parts,
            "status": "completed",
        }
    data = item.model_dump(exclude_none=True)
    data.setdefault("id", new_id(_ID_PREFIX.get(data["type"], "item")))
    if data["type"] != "reasoning":
        data.setdefault("status", "completed")
    return data


def parse_items(stored: list[dict[str, Any]]) -> list[Item]:
    return list(_ITEMS.validate_python(stored))


def to_messages(instructions: str | None, items: list[Item]) -> list[pb.ChatMessage]:
    """The conversation the neuron renders: instructions first, tool calls as
    assistant turns, tool results as tool turns; reasoning items are dropped."""
    messages: list[pb.ChatMessage] = []
    if instructions:
        messages.append(pb.ChatMessage(role="system", content=instructions))
    for item in items:
        if isinstance(item, MessageItem):
            messages.append(pb.ChatMessage(role=item.role, content=item.text()))
        elif isinstance(item, ToolCallItem):
            call = _call(item)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and last.tool_calls:
                last.tool_calls.append(call)  # parallel calls form one turn
            else:
                messages.append(pb.ChatMessage(role="assistant", content="", tool_calls=[call]))
        elif isinstance(item, ToolOutputItem):
            messages.append(
                pb.ChatMessage(role="tool", content=item.output, tool_call_id=item.call_id)
            )
    return messages


def _call(item: ToolCallItem) -> pb.ToolCall:
    """A call as the model was offered its tool (cortex/api/tools.py): under
    its namespaced name, a custom tool's input as its one argument."""
    name = model_name(item.name, item.namespace)
    if isinstance(item, CustomToolCallItem):
        arguments = json.dumps({"input": item.input})
        return pb.ToolCall(id=item.call_id, name=name, arguments=arguments)
    return pb.ToolCall(id=item.call_id, name=name, arguments=item.arguments)
