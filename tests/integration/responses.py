"""What the Responses API's integration tests share: the question they
ask, a stream's events as sent, the checks on their nesting, and the
command line of a cortex of their own in front of the session's neurons."""

from __future__ import annotations

import json
from typing import Any

import httpx

from harness.stacks import MODEL, Stack

QUESTION = "What is the capital of France?"


def cortex_args(stack: Stack, port: int, store: list[str]) -> list[str]:
    return [
        "cortex",
        "--port",
        str(port),
        "--neuron",
        stack.neuron_address,
        "--model",
        MODEL,
        *store,
    ]


def stream_events(stack: Stack, **body: Any) -> list[dict[str, Any]]:
    body = {"model": MODEL, "stream": True, **body}
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        lines = list(r.iter_lines())
    events = []
    for i, line in enumerate(lines):
        if line.startswith("data: "):
            event = json.loads(line[6:])
            assert lines[i - 1] == f"event: {event['type']}"
            events.append(event)
    return events


def check_event_stack(events: list[dict[str, Any]]) -> str:
    """Every delta inside its added/done pair, indices consistent, sequence
    numbers 0..n-1; returns the text the deltas add up to."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    open_items: dict[int, str] = {}
    open_parts: set[tuple[str, int]] = set()
    text: dict[str, list[str]] = {}
    for e in events[2:-1]:
        kind = e["type"]
        if kind == "response.output_item.added":
            open_items[e["output_index"]] = e["item"]["id"]
        elif kind == "response.content_part.added":
            assert open_items[e["output_index"]] == e["item_id"]
            open_parts.add((e["item_id"], e["content_index"]))
        elif kind == "response.output_text.delta":
            assert (e["item_id"], e["content_index"]) in open_parts
            text.setdefault(e["item_id"], []).append(e["delta"])
        elif kind == "response.output_text.done":
            assert e["text"] == "".join(text[e["item_id"]])
        elif kind == "response.content_part.done":
            open_parts.remove((e["item_id"], e["content_index"]))
        elif kind == "response.output_item.done":
            assert open_items.pop(e["output_index"]) == e["item"]["id"]
    assert not open_items and not open_parts
    return "".join("".join(parts) for parts in text.values())
