"""Every error of the foundation, as a client sees it: the OpenAI envelope with
the right status, type, param and code, from real cortex and neuron processes."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from harness.stacks import CONTEXT, MODEL, SimStack, Stack

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello"}]


def _envelope(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_malformed_json_is_400(stack: Stack) -> None:
    r = httpx.post(
        f"{stack.base_url}/v1/chat/completions",
        content=b'{"model": "x", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert _envelope(r)["type"] == "invalid_request_error"


def test_invalid_temperature_names_its_param(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        stack.client().chat.completions.create(model=MODEL, messages=HELLO, temperature=7)
    assert info.value.status_code == 400
    assert info.value.param == "temperature"
    assert info.value.type == "invalid_request_error"


# The validation 400s of every parameter: tests/unit/cortex/api/test_bad_requests.py.


def test_unknown_model_is_404_model_not_found(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        stack.client().chat.completions.create(model="no-such-model", messages=HELLO)
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    assert info.value.type == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        stack.client().models.retrieve("no-such-model")


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_over_context_is_400_context_length_exceeded(stack: Stack, stream: bool) -> None:
    over = "hello " * (CONTEXT + 100)
    long_prompt: list[ChatCompletionMessageParam] = [{"role": "user", "content": over}]
    with pytest.raises(openai.BadRequestError) as info:
        stack.client().chat.completions.create(model=MODEL, messages=long_prompt, stream=stream)
    assert info.value.code == "context_length_exceeded"
    assert str(CONTEXT) in info.value.message


def test_no_ready_neuron_is_503_with_retry_after(sim_stack: SimStack) -> None:
    r = httpx.post(
        f"{sim_stack.base_url}/v1/chat/completions", json={"model": "sim-dead", "messages": HELLO}
    )
    assert r.status_code == 503
    assert int(r.headers["retry-after"]) >= 1
    assert _envelope(r)["type"] == "server_error"
    readyz = httpx.get(f"{sim_stack.base_url}/readyz")
    assert readyz.status_code == 503 and readyz.json()["missing"] == ["sim-dead"]


def test_unexpected_failure_is_500_without_stack_trace(sim_stack: SimStack) -> None:
    r = httpx.post(
        f"{sim_stack.base_url}/v1/chat/completions",
        json={"model": sim_stack.crashing_model, "messages": HELLO},
    )
    assert r.status_code == 500
    error = _envelope(r)
    assert error["type"] == "server_error"
    assert "Traceback" not in r.text and 'File "' not in r.text


def test_failure_after_stream_start_ends_with_error_chunk_and_done(sim_stack: SimStack) -> None:
    body = {"model": sim_stack.failing_model, "messages": HELLO, "stream": True, "max_tokens": 10}
    with httpx.stream("POST", f"{sim_stack.base_url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        events = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error" and error["message"]
    contents = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-2]]
    assert "".join(c or "" for c in contents) == "tok0 tok1 tok2"

    # The SDK turns the error chunk into an exception after the good chunks.
    received: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in sim_stack.client().chat.completions.create(**body):  # type: ignore[call-overload]
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "tok0 tok1 tok2"


def test_healthy_sim_neuron_streams_to_the_end(sim_stack: SimStack) -> None:
    chunks = list(
        sim_stack.client().chat.completions.create(
            model=sim_stack.healthy_model,
            messages=HELLO,
            stream=True,
            max_tokens=4,
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "tok0 tok1 tok2 tok3"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_oversized_body_is_413(sim_stack: SimStack) -> None:
    huge = {
        "model": sim_stack.healthy_model,
        "messages": [{"role": "user", "content": "x" * (17 * 1024 * 1024)}],
    }
    r = httpx.post(f"{sim_stack.base_url}/v1/chat/completions", json=huge, timeout=30)
    assert r.status_code == 413
    assert _envelope(r)["code"] == "request_too_large"


def test_unknown_path_is_404_envelope(sim_stack: SimStack) -> None:
    r = httpx.get(f"{sim_stack.base_url}/v1/does-not-exist")
    assert r.status_code == 404
    _envelope(r)
