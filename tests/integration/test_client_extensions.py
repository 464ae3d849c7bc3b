"""What agent and benchmark clients send beyond the basic OpenAI surface,
through the real stack (SmolLM2 on vLLM's CPU backend), judged by the
pinned openai client in strict mode: vLLM's sampling extensions through
`extra_body` (as vLLM's benchmark clients send them), chat with function
and custom tools, and the Responses API's namespace and custom tools."""

from __future__ import annotations

import json
import re
from typing import Any

from openai.types.chat import ChatCompletionMessageCustomToolCall
from openai.types.responses import ResponseCustomToolCall, ResponseFunctionToolCall

from harness.stacks import MODEL, Stack
from harness.toolcalls import CITY_WEATHER, chat_tool

WEATHER = chat_tool(CITY_WEATHER)
DIGITS = "[0-9]{3}"


def test_ignore_eos_generates_exactly_max_tokens(stack: Stack) -> None:
    # vLLM's benchmark clients fix the output length this way.
    completion = stack.client().completions.create(
        model=MODEL,
        prompt="Hi.",
        max_tokens=48,
        temperature=0,
        extra_body={"ignore_eos": True, "min_p": 0.0, "repetition_penalty": 1.0},
    )
    assert completion.usage is not None and completion.usage.completion_tokens == 48


def test_min_tokens_holds_back_the_end(stack: Stack) -> None:
    chat = stack.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say yes."}],
        max_tokens=40,
        temperature=0,
        extra_body={"min_tokens": 40, "top_k": 1},
    )
    assert chat.usage is not None and chat.usage.completion_tokens == 40


def test_chat_with_tools_and_sampling_extensions(stack: Stack) -> None:
    chat = stack.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice="required",
        # One call: sampled (top_k 20), the model sometimes calls twice.
        parallel_tool_calls=False,
        max_tokens=80,
        seed=7,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05},
    )
    (call,) = chat.choices[0].message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)


def test_chat_forced_custom_tool_follows_its_grammar(stack: Stack) -> None:
    custom: Any = {
        "type": "custom",
        "custom": {
            "name": "pin",
            "description": "Enter a three-digit pin.",
            "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": DIGITS}},
        },
    }
    chat = stack.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Enter a pin."}],
        tools=[custom],
        tool_choice={"type": "custom", "custom": {"name": "pin"}},
        max_tokens=10,
    )
    (call,) = chat.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageCustomToolCall)
    assert call.custom.name == "pin" and re.fullmatch(DIGITS, call.custom.input)


def test_responses_forced_custom_tool_and_its_output_routed_back(stack: Stack) -> None:
    client = stack.client()
    tools: Any = [
        {
            "type": "custom",
            "name": "pin",
            "description": "Enter a three-digit pin.",
            "format": {"type": "grammar", "syntax": "regex", "definition": DIGITS},
        },
        {"type": "web_search"},  # hosted: left out, not refused
    ]
    first = client.responses.create(
        model=MODEL,
        input="Enter a pin.",
        tools=tools,
        tool_choice={"type": "custom", "name": "pin"},
        max_output_tokens=10,
    )
    (call,) = first.output
    assert isinstance(call, ResponseCustomToolCall) and re.fullmatch(DIGITS, call.input)
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "ok"}],
        tools=tools,
        max_output_tokens=20,
    )
    assert second.status in ("completed", "incomplete") and second.output


def test_responses_namespace_function_call_carries_its_namespace(stack: Stack) -> None:
    tools: Any = [
        {
            "type": "namespace",
            "name": "weather",
            "description": "Weather services.",
            "tools": [
                {
                    "type": "function",
                    "name": "lookup",
                    "description": "Current weather of a city.",
                    "parameters": CITY_WEATHER["parameters"],
                }
            ],
        }
    ]
    response = stack.client().responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=tools,
        tool_choice={"type": "function", "name": "lookup"},
        max_output_tokens=60,
        # Greedy: sampled, SmolLM2 once wrote a city name 60 tokens long, and
        # the arguments were cut before their JSON closed.
        temperature=0,
    )
    (call,) = response.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert (call.name, call.namespace) == ("lookup", "weather")
    assert "city" in json.loads(call.arguments)
