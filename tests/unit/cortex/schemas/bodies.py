"""Chat request bodies that the schema tests and the chat API tests both
send."""

from __future__ import annotations

from typing import Any


def custom_call_history(name: str, tool_input: str) -> list[dict[str, Any]]:
    """A conversation in which the assistant called custom tool `name` with
    `tool_input` (call id "c1") and the tool answered."""
    call = {"id": "c1", "type": "custom", "custom": {"name": name, "input": tool_input}}
    return [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
