"""Conversations that make the bundled SmolLM2 answer with tool calls under
tool_choice auto, and a timed SSE reader: shared by the integration tests of
streamed tool calls (tests/integration/test_tool_stream.py) and the
benchmark that times them (bench/tool_stream.py).

Greedy decoding makes SmolLM2's choice fixed for a given conversation, so
each answer shape has its own history: after one worked call and its
result, the same question about another city is answered with a call; after
a worked turn that said what it would do before calling (given as the
model's own text, so that it copies the shape), with text and then a call;
after a worked turn with two calls, with two calls.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from harness import sse

WEATHER: Any = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"],
}
RESPONSES_TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
CHAT_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": WEATHER,
        },
    }
]
# get_weather asking for the city alone, as the Responses API declares a
# function tool (chat_tool gives the chat completions form).
CITY_WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def chat_tool(tool: Any) -> Any:
    """A Responses function tool as chat completions declare it: the same
    fields, under "function"."""
    return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}


ASK = "What is the weather in Paris?"
PARIS_ARGUMENTS = '{"city": "Paris"}'
ANSWER = "It is sunny and 21 degrees in Paris."
AGAIN = "What is the weather in Rome?"
CHAT_ASKED_AGAIN: Any = [
    {"role": "user", "content": ASK},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_paris",
                "type": "function",
                "function": {"name": "get_weather", "arguments": PARIS_ARGUMENTS},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_paris", "content": "Sunny and 21 degrees."},
    {"role": "assistant", "content": ANSWER},
    {"role": "user", "content": AGAIN},
]
RESPONSES_ASKED_AGAIN: Any = [
    {"role": "user", "content": ASK},
    {
        "type": "function_call",
        "call_id": "call_paris",
        "name": "get_weather",
        "arguments": PARIS_ARGUMENTS,
    },
    {"type": "function_call_output", "call_id": "call_paris", "output": "Sunny and 21 degrees."},
    {"role": "assistant", "content": ANSWER},
    {"role": "user", "content": AGAIN},
]


def hermes_call(city: str) -> str:
    """A call as SmolLM2 writes them (the hermes convention)."""
    body = json.dumps({"name": "get_weather", "arguments": {"city": city}})
    return f"<tool_call>\n{body}\n</tool_call>"


# Worked turns given as the model's own text, so that it copies their shape.
SAYS_THEN_CALLS: Any = [
    {"role": "user", "content": ASK},
    {
        "role": "assistant",
        "content": "I will look up the weather in Paris.\n" + hermes_call("Paris"),
    },
    {"role": "tool", "tool_call_id": "call_paris", "content": "Sunny and 21 degrees."},
    {"role": "assistant", "content": ANSWER},
    {"role": "user", "content": AGAIN},
]
CALLS_TWICE: Any = [
    {"role": "user", "content": "What is the weather in Paris and in London?"},
    {"role": "assistant", "content": hermes_call("Paris") + "\n" + hermes_call("London")},
    {"role": "tool", "tool_call_id": "call_paris", "content": "Paris: sunny. London: rain."},
    {"role": "assistant", "content": "Paris is sunny and London is rainy."},
    {"role": "user", "content": "What is the weather in Rome and in Berlin?"},
]


def timed_sse(url: str, body: dict[str, Any]) -> list[tuple[float, dict[str, Any]]]:
    """Each SSE data object with the time it arrived, from the request's start."""
    started = time.monotonic()
    out: list[tuple[float, dict[str, Any]]] = []
    with httpx.stream("POST", url, json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for event in sse.objects(r.iter_lines()):
            out.append((time.monotonic() - started, event))
    return out


def timed_tool_chat(base_url: str, model: str, messages: Any) -> list[tuple[float, dict[str, Any]]]:
    """A greedy chat streamed with CHAT_TOOLS under tool_choice auto: each
    chunk's first choice (its delta, and the finish reason on the last) with
    the time it arrived."""
    body = {
        "model": model,
        "messages": messages,
        "tools": CHAT_TOOLS,
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": 150,
        "stream": True,
    }
    chunks = timed_sse(f"{base_url}/v1/chat/completions", body)
    return [(t, c["choices"][0]) for t, c in chunks if c["choices"]]
