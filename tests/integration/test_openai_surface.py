"""The rest of the OpenAI surface through the real stack (SmolLM2 and
all-MiniLM-L6-v2 on vLLM's CPU backend): tools, structured outputs, logprobs,
n, seeds, stop, legacy completions, embeddings and the models list.

The strict openai client judges every non-streamed body and every chat chunk.
Two SDK types are stricter than OpenAI's own wire and are checked over raw
HTTP instead: a legacy completion chunk's finish_reason (null until the last
chunk, typed non-nullable by the SDK) and base64 embeddings (typed list[float]).
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from harness.stacks import EMBEDDING_MODEL, MODEL, Stack

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"],
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": WEATHER_PARAMS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Get the local time in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
]
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


def _schema_of(name: str) -> dict[str, Any]:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def _offering_tools(messages: list[Any], tool_choice: Any, max_tokens: int) -> Any:
    """The arguments of a greedy chat completion offered TOOLS."""
    return {
        "model": MODEL,
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "temperature": 0,
        "max_tokens": max_tokens,
    }


@pytest.mark.parametrize("tool_choice", [NAMED, "required"])
def test_forced_tool_call(stack: Stack, tool_choice: Any) -> None:
    completion = stack.client().chat.completions.create(**_offering_tools(ASK, tool_choice, 200))
    choice = completion.choices[0]
    calls = choice.message.tool_calls or []
    assert calls, choice
    for call in calls:
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        assert call.type == "function" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), _schema_of(call.function.name))
    if tool_choice == NAMED:
        assert [c.function.name for c in calls if c.type == "function"] == ["get_weather"]
        assert choice.finish_reason == "stop"
    else:
        assert choice.finish_reason == "tool_calls"


@pytest.mark.parametrize("tool_choice", [NAMED, "required"])
def test_forced_tool_call_streamed(stack: Stack, tool_choice: Any) -> None:
    chunks = list(
        stack.client().chat.completions.create(
            **_offering_tools(ASK, tool_choice, 200), stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content is None
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    first = deltas[0]
    assert first.id and first.id.startswith("call_") and first.type == "function"
    assert first.function is not None and first.function.arguments == ""
    name = first.function.name
    assert name in {"get_weather", "get_time"}
    for later in deltas[1:]:
        assert later.id is None or later.index != first.index
    arguments = "".join(
        d.function.arguments or "" for d in deltas if d.index == 0 and d.function is not None
    )
    jsonschema.validate(json.loads(arguments), _schema_of(str(name)))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert finishes == (["stop"] if tool_choice == NAMED else ["tool_calls"])


def test_tool_result_fed_back_gives_an_answer(stack: Stack) -> None:
    client = stack.client()
    calls = (
        client.chat.completions.create(**_offering_tools(ASK, NAMED, 200))
        .choices[0]
        .message.tool_calls
    )
    assert calls
    call = calls[0]
    history: list[Any] = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny and 21 degrees."},
    ]
    answer = client.chat.completions.create(
        model=MODEL,
        messages=history,
        tools=TOOLS,
        tool_choice="none",
        temperature=0,
        max_tokens=40,
    )
    message = answer.choices[0].message
    assert message.role == "assistant" and message.content and not message.tool_calls


# tool_choice "auto": greedy decoding makes SmolLM2's choice fixed for a given
# conversation, so each branch is driven by its own conversation and the test
# asserts the one the model takes: a greeting is answered in text; after one
# worked call and its result in the history, the same question about another
# city is answered with a call (parsed by the hermes tool parser).
PARIS_CALL: Any = {
    "id": "call_paris",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
ASKED_AGAIN: list[Any] = [
    *ASK,
    {"role": "assistant", "content": None, "tool_calls": [PARIS_CALL]},
    {"role": "tool", "tool_call_id": "call_paris", "content": "Sunny and 21 degrees."},
    {"role": "assistant", "content": "It is sunny and 21 degrees in Paris."},
    {"role": "user", "content": "What is the weather in Rome?"},
]


def test_auto_tool_choice_answers_a_greeting_in_text(stack: Stack) -> None:
    choice = (
        stack.client()
        .chat.completions.create(
            **_offering_tools([{"role": "user", "content": "Say hello."}], "auto", 60)
        )
        .choices[0]
    )
    assert choice.finish_reason == "stop", choice
    assert choice.message.tool_calls is None and choice.message.content, choice
    assert "<tool_call>" not in choice.message.content


def test_auto_tool_choice_parses_the_models_call(stack: Stack) -> None:
    choice = (
        stack.client()
        .chat.completions.create(**_offering_tools(ASKED_AGAIN, "auto", 100))
        .choices[0]
    )
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls or []
    assert len(calls) == 1, choice
    call = calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER_PARAMS)
    assert arguments["city"] == "Rome"


def test_json_schema_response_validates(stack: Stack) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "London", "Rome"]},
            "sunny": {"type": "boolean"},
        },
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    completion = stack.client().chat.completions.create(
        model=MODEL,
        messages=ASK,
        temperature=0,
        max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    )
    assert completion.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(completion.choices[0].message.content or ""), schema)


def test_json_object_response_is_an_object(stack: Stack) -> None:
    # A request the model finishes well inside max_tokens (greedy), so the
    # test sees the whole constrained output end by itself.
    completion = stack.client().chat.completions.create(
        model=MODEL,
        temperature=0,
        max_tokens=80,
        response_format={"type": "json_object"},
        messages=[
            {
                "role": "user",
                "content": 'Reply with a JSON object with one key "name" whose value is "Tom".',
            }
        ],
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice
    answer = json.loads(choice.message.content or "")
    assert isinstance(answer, dict) and "name" in answer, answer


def test_logprobs(stack: Stack) -> None:
    completion = stack.client().chat.completions.create(
        model=MODEL, messages=ASK, logprobs=True, top_logprobs=3, max_tokens=6, temperature=0
    )
    content = completion.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == completion.usage.completion_tokens  # type: ignore[union-attr]
    assert "".join(t.token for t in content) == completion.choices[0].message.content
    for token in content:
        assert token.logprob <= 0
        assert len(token.top_logprobs) == 3
        assert all(t.logprob <= 0 for t in token.top_logprobs)
        # Greedy decoding picks the most likely token.
        assert token.logprob == pytest.approx(max(t.logprob for t in token.top_logprobs))


def test_logprobs_streamed(stack: Stack) -> None:
    chunks = list(
        stack.client().chat.completions.create(
            model=MODEL,
            messages=ASK,
            logprobs=True,
            top_logprobs=2,
            max_tokens=5,
            temperature=0,
            stream=True,
        )
    )
    tokens = [
        t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content or []
    ]
    assert len(tokens) == 5 and all(len(t.top_logprobs) == 2 for t in tokens)


def test_n_gives_several_choices(stack: Stack) -> None:
    completion = stack.client().chat.completions.create(
        model=MODEL, messages=ASK, n=2, temperature=1, max_tokens=10
    )
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.usage is not None and completion.usage.completion_tokens <= 20
    chunks = list(
        stack.client().chat.completions.create(
            model=MODEL, messages=ASK, n=2, temperature=1, max_tokens=5, stream=True
        )
    )
    assert {c.choices[0].index for c in chunks} == {0, 1}
    finishes = sorted(c.choices[0].index for c in chunks if c.choices[0].finish_reason)
    assert finishes == [0, 1]


def test_same_seed_same_text(stack: Stack) -> None:
    client = stack.client()
    args: Any = {"model": MODEL, "messages": ASK, "seed": 42, "temperature": 1, "max_tokens": 24}
    first = client.chat.completions.create(**args).choices[0].message.content
    second = client.chat.completions.create(**args).choices[0].message.content
    assert first and first == second


def test_stop_sequences_stop(stack: Stack) -> None:
    client = stack.client()
    free = client.completions.create(
        model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0
    )
    text = free.choices[0].text
    assert "7" in text  # the model counts on
    for stop in ("7", ["7", "zebra"]):
        cut = client.completions.create(
            model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=stop
        )
        assert cut.choices[0].finish_reason == "stop"
        assert cut.choices[0].text == text[: text.index("7")]
    chat = client.chat.completions.create(
        model=MODEL, messages=ASK, temperature=0, max_tokens=30, stop=["Paris"]
    )
    assert "Paris" not in (chat.choices[0].message.content or "")
    assert chat.choices[0].finish_reason == "stop"


def test_completions(stack: Stack) -> None:
    client = stack.client()
    completion = client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert completion.object == "text_completion"
    assert "Paris" in completion.choices[0].text
    usage = completion.usage
    assert usage is not None and usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    echoed = client.completions.create(
        model=MODEL,
        prompt=["One two", "Red green"],
        max_tokens=4,
        temperature=1,
        seed=3,
        n=2,
        echo=True,
    )
    assert [c.index for c in echoed.choices] == [0, 1, 2, 3]
    assert [c.text.split(" ")[0] for c in echoed.choices] == ["One", "One", "Red", "Red"]

    with_logprobs = client.completions.create(
        model=MODEL, prompt="Hello", max_tokens=3, temperature=0, logprobs=2
    )
    lp = with_logprobs.choices[0].logprobs
    assert lp is not None and lp.tokens and lp.token_logprobs and lp.top_logprobs
    assert len(lp.tokens) == 3 and all(v <= 0 for v in lp.token_logprobs)
    assert "".join(lp.tokens) == with_logprobs.choices[0].text


def test_completions_streamed(stack: Stack) -> None:
    body = {
        "model": MODEL,
        "prompt": "The capital of France is",
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    whole = stack.client().completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0
    )
    with httpx.stream("POST", f"{stack.base_url}/v1/completions", json=body, timeout=60) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "text_completion" for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == whole.choices[0].text
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] <= 8
    # The SDK (not strict: see the module docstring) reads the same stream.
    lax = OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused", max_retries=0)
    streamed = lax.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == text


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_embeddings(stack: Stack) -> None:
    result = stack.client().embeddings.create(
        model=EMBEDDING_MODEL, input=["cat", "kitten", "carburetor"], encoding_format="float"
    )
    assert [d.index for d in result.data] == [0, 1, 2]
    cat, kitten, carburetor = (d.embedding for d in result.data)
    assert len(cat) == 384
    assert _cosine(cat, kitten) > _cosine(cat, carburetor)
    assert (
        result.usage.prompt_tokens > 0 and result.usage.total_tokens == result.usage.prompt_tokens
    )


def test_embeddings_base64_agrees_with_float(stack: Stack) -> None:
    url = f"{stack.base_url}/v1/embeddings"
    floats = httpx.post(url, json={"model": EMBEDDING_MODEL, "input": "cat"}).json()
    b64 = httpx.post(
        url, json={"model": EMBEDDING_MODEL, "input": "cat", "encoding_format": "base64"}
    ).json()
    raw = base64.b64decode(b64["data"][0]["embedding"])
    decoded = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    assert decoded == pytest.approx(floats["data"][0]["embedding"], abs=1e-6)
    # The SDK's default path asks for base64 and decodes it itself.
    lax = OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused", max_retries=0)
    sdk = lax.embeddings.create(model=EMBEDDING_MODEL, input="cat").data[0].embedding
    assert sdk == pytest.approx(floats["data"][0]["embedding"], abs=1e-6)


def test_embeddings_of_token_arrays(stack: Stack) -> None:
    client = stack.client()
    single = client.embeddings.create(
        model=EMBEDDING_MODEL, input=[101, 4937, 102], encoding_format="float"
    )
    batch = client.embeddings.create(
        model=EMBEDDING_MODEL, input=[[101, 4937, 102], [101, 3899, 102]], encoding_format="float"
    )
    assert len(single.data) == 1 and len(batch.data) == 2
    assert single.data[0].embedding == pytest.approx(batch.data[0].embedding, abs=1e-5)
    assert single.usage.prompt_tokens == 3


def test_wrong_kind_of_model_is_400_naming_the_models(stack: Stack) -> None:
    client = stack.client()
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input="cat", encoding_format="float")
    assert info.value.param == "model" and EMBEDDING_MODEL in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=EMBEDDING_MODEL, messages=ASK)
    assert info.value.param == "model" and MODEL in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=EMBEDDING_MODEL, prompt="Hi")
    assert info.value.param == "model"


# The validation 400s of every parameter: tests/unit/cortex/api/test_bad_requests.py.
