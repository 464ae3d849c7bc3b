"""Chat completions through the whole real path: openai SDK (strict) → cortex
→ gRPC → neuron → vLLM CPU with SmolLM2-135M-Instruct."""

from __future__ import annotations

import time

import grpc
import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam

from axon.v1 import neuron_pb2 as pb
from harness.procs import engine_load, neuron_stub
from harness.stacks import CONTEXT, EMBEDDING_MODEL, MODEL, Stack
from harness.streamed_chat import greedy_chat

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]


def test_capital_of_france(stack: Stack) -> None:
    completion = stack.client().chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        temperature=0,
    )
    assert "Paris" in (completion.choices[0].message.content or "")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.object == "chat.completion"


def test_capital_of_france_streamed(stack: Stack) -> None:
    stream = stack.client().chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        temperature=0,
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_streamed_text_equals_non_streamed_for_same_seed(stack: Stack) -> None:
    client = stack.client()
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Tell me a short story about a cat."}
    ]
    args = {
        "model": MODEL,
        "messages": messages,
        "temperature": 1.0,
        "seed": 1234,
        "max_tokens": 40,
    }
    whole = client.chat.completions.create(**args)  # type: ignore[call-overload]
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(stream=True, **args)  # type: ignore[call-overload]
        if c.choices
    )
    assert whole.choices[0].message.content
    assert streamed == whole.choices[0].message.content


# More prompt tokens than one step of vLLM's CPU engine prefills (its
# max_num_batched_tokens, 2,048): the prompt is prefilled in chunks.
LONGER_THAN_A_STEP = "The quick brown fox jumps over the lazy dog. " * 240


def test_a_seeded_request_prefilled_in_chunks_is_served_and_the_engine_lives(
    stack: Stack,
) -> None:
    """vLLM 0.32's CPU engine died on it (issue 31 point 9:
    neuron/engine/vllm/cpu_seed.py), and with it every request on the replica."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": LONGER_THAN_A_STEP + "Say hi."}],
        "seed": 11,
        "temperature": 0.8,
        "max_tokens": 4,
    }
    r = httpx.post(f"{stack.base_url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 2048
    after = stack.client().chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=4
    )
    assert after.choices[0].message.content


def test_usage_adds_up(stack: Stack) -> None:
    client = stack.client()
    whole = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        temperature=0,
        max_tokens=5,
    )
    usage = whole.usage
    assert usage is not None
    assert usage.completion_tokens == 5 and whole.choices[0].finish_reason == "length"
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens is not None

    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            temperature=0,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.usage is None for c in chunks[:-1])
    final = chunks[-1]
    assert final.choices == [] and final.usage is not None
    assert final.usage.completion_tokens == 5
    assert final.usage.prompt_tokens == usage.prompt_tokens
    assert final.usage.total_tokens == final.usage.prompt_tokens + 5


def _wait_idle(address: str, timeout: float = 10) -> pb.LoadResponse:
    deadline = time.monotonic() + timeout
    load = engine_load(address)
    while (load.running or load.waiting) and time.monotonic() < deadline:
        time.sleep(0.1)
        load = engine_load(address)
    return load


def test_client_disconnect_aborts_generation_in_engine(stack: Stack) -> None:
    assert _wait_idle(stack.neuron_address).running == 0
    body = greedy_chat(MODEL, "Write a very long essay about the sea.", 1000)
    with httpx.stream("POST", f"{stack.base_url}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        seen = 0
        for line in lines:
            if line.startswith("data: "):
                seen += 1
            if seen >= 5:
                break
        # Mid-stream, the engine is generating for this request.
        assert engine_load(stack.neuron_address).running == 1
    # The connection is closed: the request must leave the engine, well before
    # its 1000 tokens could have been generated.
    load = _wait_idle(stack.neuron_address)
    assert (load.running, load.waiting) == (0, 0)


def test_non_streamed_request_is_aborted_when_the_client_leaves(stack: Stack) -> None:
    assert _wait_idle(stack.neuron_address).running == 0
    body = {
        "model": MODEL,
        "max_tokens": 1000,
        # Greedy: a long answer every time (sampling can end it early).
        "temperature": 0,
        "messages": [{"role": "user", "content": "Write a very long essay about rivers."}],
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{stack.base_url}/v1/chat/completions", json=body, timeout=1.5)
    load = _wait_idle(stack.neuron_address)
    assert (load.running, load.waiting) == (0, 0)


def test_grpc_deadline_is_honoured(stack: Stack) -> None:
    request = pb.GenerateRequest(
        request_id="deadline-test",
        model=MODEL,
        messages=[pb.ChatMessage(role="user", content="Write a very long essay about mountains.")],
        sampling=pb.SamplingParams(max_tokens=1000, temperature=1.0),
    )
    received = 0
    with grpc.insecure_channel(stack.neuron_address) as channel:
        stub = neuron_stub(channel)
        with pytest.raises(grpc.RpcError) as info:
            for _ in stub.Generate(request, timeout=1.5):
                received += 1
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert received > 0
    load = _wait_idle(stack.neuron_address)
    assert (load.running, load.waiting) == (0, 0)


def test_neuron_info(stack: Stack) -> None:
    with grpc.insecure_channel(stack.neuron_address) as channel:
        info = neuron_stub(channel).Info(pb.InfoRequest(), timeout=5)
    assert info.ready
    assert info.generation == pb.GPU_GENERATION_CPU
    assert info.engine.startswith("vllm")
    assert [m.id for m in info.models] == [MODEL]
    assert info.models[0].max_context_length == CONTEXT  # as `up --max-model-len` set it


def test_models_endpoints(stack: Stack) -> None:
    client = stack.client()
    models = client.models.list()
    assert sorted(m.id for m in models.data) == sorted([MODEL, EMBEDDING_MODEL])
    for m in models.data:
        assert m.owned_by == "neuraxis" and m.created > 0
    endpoints = {m.id: m.model_extra["endpoints"] for m in models.data if m.model_extra}
    assert endpoints == {
        MODEL: ["/v1/chat/completions", "/v1/completions", "/v1/responses"],
        EMBEDDING_MODEL: ["/v1/embeddings"],
    }
    assert client.models.retrieve(MODEL).id == MODEL
    assert httpx.get(f"{stack.base_url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{stack.base_url}/readyz").status_code == 200
