"""The Responses API through the real stack, continued from
test_responses.py: background runs and cancels, truncation, a client that
leaves, replay of a stored stream, a cortex or neuron that dies mid-run,
the SDK's fields, logprobs and max_tool_calls."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harness.gateway import Sim, sim_gateway
from harness.polling import wait_until
from harness.ports import free_port
from harness.procs import Proc, engine_load, wait_http_ready
from harness.stacks import CONTEXT, MODEL, SimStack, Stack, strict_client
from harness.toolcalls import CITY_WEATHER
from tests.integration.responses import QUESTION, check_event_stack, cortex_args, stream_events


def test_failure_mid_stream_ends_with_response_failed(sim_stack: SimStack) -> None:
    body = {
        "model": sim_stack.failing_model,
        "input": "Hi",
        "stream": True,
        "max_output_tokens": 10,
    }
    with httpx.stream("POST", f"{sim_stack.base_url}/v1/responses", json=body, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] and failed["error"]["message"]
    # The SDK's stream helper (strict) reads the same ending.
    with strict_client(sim_stack.base_url).responses.stream(
        model=sim_stack.failing_model, input="Hi", max_output_tokens=10
    ) as stream:
        last = list(stream)[-1]
    assert last.type == "response.failed"
    assert last.response.error is not None and last.response.error.message


def _wait_status(client: Any, response_id: str, done: set[str], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    response = client.responses.retrieve(response_id)
    while response.status not in done and time.monotonic() < deadline:
        time.sleep(0.2)
        response = client.responses.retrieve(response_id)
    return response


def test_background_response_completes(stack: Stack) -> None:
    client = stack.client()
    queued = client.responses.create(model=MODEL, input=QUESTION, temperature=0, background=True)
    assert queued.status in ("queued", "in_progress") and queued.background is True
    done = _wait_status(client, queued.id, {"completed", "failed", "incomplete"})
    assert done.status == "completed" and "Paris" in done.output_text


def test_cancel_background_response_aborts_generation(stack: Stack) -> None:
    client = stack.client()
    queued = client.responses.create(
        model=MODEL,
        input="Write a very long essay about the sea.",
        temperature=1,
        max_output_tokens=1000,
        background=True,
    )
    _wait_status(client, queued.id, {"in_progress"})
    # Cancel while the engine is generating it (not before it got there).
    deadline = time.monotonic() + 30
    while engine_load(stack.neuron_address).running == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_load(stack.neuron_address).running == 1
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(queued.id).status == "cancelled"
    deadline = time.monotonic() + 10
    load = engine_load(stack.neuron_address)
    while load.running and time.monotonic() < deadline:
        time.sleep(0.1)
        load = engine_load(stack.neuron_address)
    assert load.running == 0


def test_cancel_of_a_foreground_response_is_400(stack: Stack) -> None:
    client = stack.client()
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=3)
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(response.id)


# What truncation leaves for the prompt: max_output_tokens takes the rest of
# the context, so `truncation: auto` keeps only the newest turns that fit in
# PROMPT_ROOM tokens, whose prefill takes a moment (a prompt at the whole
# context took ~125 s on two cores); the answer itself is not waited for.
PROMPT_ROOM = 1024


def test_truncation_auto_drops_the_oldest_turns(stack: Stack) -> None:
    per_turn = PROMPT_ROOM // 4  # ten turns: over the room by about two and a half
    roles = ["user", "assistant"]
    long_turns: Any = [
        {"role": roles[i % 2], "content": f"Note {i}: " + "hello " * per_turn} for i in range(10)
    ] + [{"role": "user", "content": QUESTION}]
    max_output = CONTEXT - PROMPT_ROOM
    with pytest.raises(openai.BadRequestError) as info:
        stack.client().responses.create(model=MODEL, input=long_turns, max_output_tokens=max_output)
    assert info.value.code == "context_length_exceeded"
    body = {
        "model": MODEL,
        "input": long_turns,
        "max_output_tokens": max_output,
        "truncation": "auto",
        "temperature": 0,
        "stream": True,
    }
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] in ("response.output_text.delta", "response.failed"):
                    break  # leaving cancels the rest of the answer
    assert events[0]["type"] == "response.created"
    assert events[0]["response"]["truncation"] == "auto"
    # Generating at all: the same conversation untruncated was refused above.
    assert events[-1]["type"] == "response.output_text.delta", events[-1]


def test_parallel_tool_calls_false_gives_one_call(stack: Stack) -> None:
    response = stack.client().responses.create(
        model=MODEL,
        input="Weather in Paris and in Rome?",
        tools=[CITY_WEATHER],
        temperature=0,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and response.parallel_tool_calls is False
    json.loads(calls[0].arguments)


def test_client_disconnect_aborts_the_generation(stack: Stack) -> None:
    idle = wait_until(lambda: engine_load(stack.neuron_address).running == 0, 30)
    assert idle, "an earlier test's request still runs on the engine"
    body = {
        "model": MODEL,
        # Greedy SmolLM2 counts on for hundreds of tokens (an essay it ended
        # early once, before the load was read).
        "input": "Count from 1 to 1000, one per line.",
        "stream": True,
        "temperature": 0,
        "max_output_tokens": 1000,
    }
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", json=body, timeout=60) as r:
        deltas, running = 0, False
        for line in r.iter_lines():
            deltas += line.startswith("event: response.output_text.delta")
            # The engine's load is its stats logger's last step: a moment behind
            # the tokens on a busy machine. The stream is read meanwhile: one
            # left unread is cut by cortex's slow-reader guard, which ended the
            # generation before a slow load report showed it (CI, once).
            if deltas >= 5 and engine_load(stack.neuron_address).running >= 1:
                running = True
                break
        assert running, "the engine never reported the request running"
    assert wait_until(lambda: engine_load(stack.neuron_address).running == 0, 10)


def test_stream_replay_of_a_stored_response(stack: Stack) -> None:
    events = stream_events(stack, input=QUESTION, temperature=0)
    response_id = events[-1]["response"]["id"]
    url = f"{stack.base_url}/v1/responses/{response_id}"
    with httpx.stream("GET", url, params={"stream": "true"}) as r:
        replayed = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ")]
    assert replayed == events
    with httpx.stream("GET", url, params={"stream": "true", "starting_after": 3}) as r:
        tail = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ")]
    assert tail == events[4:]


def test_background_response_cut_by_a_cortex_crash_ends_failed(
    stack: Stack, logs_dir: Path
) -> None:
    port = free_port()
    state = ["--state-dir", str(logs_dir / "crash-state")]
    args = cortex_args(stack, port, state)
    base = f"http://127.0.0.1:{port}"
    first = Proc(args, logs_dir / "cortex-crash-1.log")
    try:
        wait_http_ready(first, f"{base}/readyz", 60)
        client = strict_client(base)
        queued = client.responses.create(
            model=MODEL,
            input="Write a very long essay about the sea.",
            max_output_tokens=1000,
            background=True,
        )
        _wait_status(client, queued.id, {"in_progress"})
    finally:
        first.stop(signal.SIGKILL)
    second = Proc(args, logs_dir / "cortex-crash-2.log")
    try:
        wait_http_ready(second, f"{base}/readyz", 60)
        failed = strict_client(base).responses.retrieve(queued.id)
        assert failed.status == "failed"
        assert failed.error is not None and "restarted" in failed.error.message
    finally:
        second.stop()
    deadline = time.monotonic() + 10
    while engine_load(stack.neuron_address).running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_load(stack.neuron_address).running == 0


def test_neuron_killed_mid_stream_ends_with_response_failed(logs_dir: Path) -> None:
    sim = Sim("sim-slow", ["--sim-itl-s", "0.05"])
    state = ["--state-dir", str(logs_dir / "killed-state")]
    ready = "/v1/models/sim-slow"
    with sim_gateway(logs_dir, "killed", *state, sims=[sim], ready=ready) as running:
        base, neuron = running.base_url, running.neuron.proc
        body = {"model": "sim-slow", "input": "Hi", "stream": True, "max_output_tokens": 200}
        events = []
        with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1]["type"] == "response.output_text.delta" and neuron.alive():
                        neuron.stop(signal.SIGKILL)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["message"]
        stored = strict_client(base).responses.retrieve(events[-1]["response"]["id"])
        assert stored.status == "failed"


# --- the response object real clients read (issue 16 part 1) ------------------


def test_every_sdk_field_and_the_stored_copy_equal_to_the_created(stack: Stack) -> None:
    body = {
        "model": MODEL,
        "input": QUESTION,
        "temperature": 0,
        "max_output_tokens": 20,
        "prompt_cache_key": "france",
        "safety_identifier": "hashed-user-1",
        "user": "u-1",
        "service_tier": "auto",
        "client_metadata": {"x-client": "integration"},
    }
    created = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=120).json()
    stored = httpx.get(f"{stack.base_url}/v1/responses/{created['id']}", timeout=10).json()
    assert stored == created
    sdk_fields = {f.alias or n for n, f in openai.types.responses.Response.model_fields.items()}
    assert sdk_fields <= set(created)
    assert created["status"] in ("completed", "incomplete")
    if created["status"] == "completed":
        assert created["completed_at"] >= created["created_at"]
    assert created["prompt_cache_key"] == "france" and created["service_tier"] == "default"
    assert created["safety_identifier"] == "hashed-user-1" and created["user"] == "u-1"
    assert created["client_metadata"] == {"x-client": "integration"}
    # The strict SDK reads it, completed_at included.
    response = strict_client(stack.base_url).responses.retrieve(created["id"])
    assert response.completed_at == created["completed_at"]


def test_completed_at_on_a_completed_response(stack: Stack) -> None:
    before = int(time.time())
    response = strict_client(stack.base_url).responses.create(
        model=MODEL, input=QUESTION, temperature=0
    )
    assert response.status == "completed"
    assert response.completed_at is not None and before <= response.completed_at <= time.time()


def test_logprobs_on_text_deltas_and_on_the_part(stack: Stack) -> None:
    events = stream_events(
        stack,
        input=QUESTION,
        temperature=0,
        max_output_tokens=12,
        top_logprobs=2,
        include=["message.output_text.logprobs"],
    )
    check_event_stack(events)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(d["logprobs"] for d in deltas)
    for entry in (lp for d in deltas for lp in d["logprobs"]):
        assert entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 2
    (part,) = next(e for e in events if e["type"] == "response.output_item.done")["item"]["content"]
    assert part["logprobs"] == [lp for d in deltas for lp in d["logprobs"]]
    plain = stream_events(stack, input=QUESTION, temperature=0, max_output_tokens=12)
    assert all(e["logprobs"] == [] for e in plain if e["type"] == "response.output_text.delta")


# A prompt the small model answers with two calls when tool_choice is required.
TWO_CITIES = (
    "What is the weather in Paris and what is the weather in Tokyo? "
    "Call the tool once for each city."
)


def _calls(stack: Stack, **body: Any) -> list[Any]:
    response = strict_client(stack.base_url).responses.create(
        model=MODEL,
        input=TWO_CITIES,
        tools=[CITY_WEATHER],
        tool_choice="required",
        temperature=0,
        **body,
    )
    assert response.status == "completed"
    return [item for item in response.output if item.type == "function_call"]


def test_max_tool_calls_caps_the_calls_in_a_response(stack: Stack) -> None:
    # The same request without the cap makes several calls: the cap, not the
    # model, is what leaves one.
    assert len(_calls(stack)) >= 2
    capped = _calls(stack, max_tool_calls=1)
    assert len(capped) == 1 and capped[0].name == "get_weather"
    json.loads(capped[0].arguments)
