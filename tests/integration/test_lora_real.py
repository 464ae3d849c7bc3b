"""Issue 28's acceptance on real vLLM (CPU): LoRA adapters of SmolLM2 made
here with peft (harness/lora_adapters.py), served by one real neuron
(`--max-adapters 2`) behind cortex with auth on.

Covered: the base and each adapter answering differently at temperature 0,
each the same every time; adapters configured on the neuron and added at
run time (our body and vLLM's), removed (then 404 model_not_found); evictions
while adapters stream, none broken; a key scoped to one adapter kept off the
other; chat, completions and Responses (a previous_response_id chain, a
background response) on an adapter; an adapter asked to embed (400);
/v1/models with each adapter's parent. The same paths on simulated engines,
with routing across two neurons: test_lora_routing.py.

One engine start for the whole module (30-100 s): the suite's time is short.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.keys import new_key
from harness.lora_adapters import make_adapters, prepared_model
from harness.polling import wait_until
from harness.real_gateway import RealGateway, real_gateway
from harness.stacks import MODEL

pytestmark = pytest.mark.lane("stack")

# Configured on the neuron at start; the others are added at run time from
# the same directories (same weights: the same answers).
A, B = "lora-a", "lora-b"
PROMPT = "Say something."
# Enough for the base and both adapters to part ways on PROMPT (at the 6th
# token), few enough to keep the module short.
TOKENS = 10
TIMEOUT_S = 120


@dataclass(frozen=True)
class Lora:
    gateway: RealGateway
    dirs: dict[str, Path]  # the adapters made for the module, by id
    key: str  # anyone's
    a_only: str  # a key scoped to lora-a
    # Each model's answer to PROMPT, as a chat first gave it (_answer).
    answers: dict[str, str] = field(default_factory=dict)

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lora]:
    dirs = make_adapters(prepared_model(), tmp_path_factory.mktemp("adapters"), [A, B])
    logs = tmp_path_factory.mktemp("lora-real-logs")
    state = tmp_path_factory.mktemp("lora-real-state")
    key, a_only = new_key(state, "t"), new_key(state, "t", "--models", A)
    neuron = ["--max-adapters", "2", "--max-lora-rank", "16", "--max-model-len", "1024"]
    for adapter, path in dirs.items():
        neuron += ["--adapters", f"{adapter}={path}"]
    cortex = ("--auth", "required", "--state-dir", str(state))
    with real_gateway(logs, "lora-real", *cortex, neuron_flags=neuron) as gateway:
        yield Lora(gateway, dirs, key, a_only)


def _chat_body(model: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": PROMPT}]
    return {"model": model, "messages": messages, "temperature": 0, "max_tokens": TOKENS, **extra}


def _post(lora: Lora, path: str, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    url = f"{lora.gateway.base_url}{path}"
    return httpx.post(url, json=body, headers=lora.headers(key), timeout=TIMEOUT_S)


def _chat(lora: Lora, model: str, key: str | None = None) -> str:
    response = _post(lora, "/v1/chat/completions", _chat_body(model), key)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == model
    return str(response.json()["choices"][0]["message"]["content"])


def _answer(lora: Lora, model: str) -> str:
    """`model`'s answer to PROMPT: the module's first, asked for once."""
    if model not in lora.answers:
        lora.answers[model] = _chat(lora, model)
    return lora.answers[model]


def _not_found(response: httpx.Response, model: str) -> None:
    """OpenAI's 404 for a model that does not exist (or not for this key)."""
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "model_not_found")
    assert model in error["message"]


def _admin(lora: Lora, method: str, path: str, body: Any = None) -> httpx.Response:
    url = f"{lora.gateway.admin_url}{path}"
    return httpx.request(method, url, json=body, timeout=TIMEOUT_S)


def test_adapters_are_listed_with_their_parent(lora: Lora) -> None:
    listed = httpx.get(f"{lora.gateway.base_url}/v1/models", headers=lora.headers()).json()
    parents = {m["id"]: m.get("parent") for m in listed["data"]}
    assert parents == {MODEL: None, A: MODEL, B: MODEL}
    scoped = httpx.get(f"{lora.gateway.base_url}/v1/models", headers=lora.headers(lora.a_only))
    assert [m["id"] for m in scoped.json()["data"]] == [A]


def test_the_base_and_each_adapter_answer_differently_each_the_same_every_time(
    lora: Lora,
) -> None:
    answers = {model: _answer(lora, model) for model in (MODEL, A, B)}
    assert len(set(answers.values())) == 3, answers
    for model in (A, B, A):  # an adapter again after the other one ran
        assert _chat(lora, model) == answers[model]


def test_a_key_scoped_to_one_adapter_cannot_use_the_other(lora: Lora) -> None:
    assert _chat(lora, A, lora.a_only) == _answer(lora, A)
    for model in (B, MODEL):
        _not_found(_post(lora, "/v1/chat/completions", _chat_body(model), lora.a_only), model)


def test_adapters_added_at_run_time_answer_and_removed_are_not_found(lora: Lora) -> None:
    """Ours (`model`, `id`, `source`) and vLLM's body (`lora_name`,
    `lora_path`: the base is the one model with adapters)."""
    ours = {"model": MODEL, "id": "run-a", "source": str(lora.dirs[A])}
    added = _admin(lora, "POST", "/v1/adapters", ours)
    assert added.status_code == 200, added.text
    vllm = {"lora_name": "run-b", "lora_path": str(lora.dirs[B])}
    added = _admin(lora, "POST", "/v1/adapters", vllm)
    assert added.status_code == 200 and added.json()["parent"] == MODEL, added.text
    try:
        # The same weights as the adapters configured at start: the same answers.
        assert _chat(lora, "run-a") == _answer(lora, A)
        assert _chat(lora, "run-b") == _answer(lora, B)
        listed = _admin(lora, "GET", "/v1/adapters").json()["data"]
        assert {a["id"]: a["parent"] for a in listed}["run-b"] == MODEL
    finally:
        removed = [_admin(lora, "DELETE", f"/v1/adapters/{a}") for a in ("run-a", "run-b")]
    assert [r.status_code for r in removed] == [200, 200], [r.text for r in removed]
    _not_found(_post(lora, "/v1/chat/completions", _chat_body("run-a")), "run-a")
    models = httpx.get(f"{lora.gateway.base_url}/v1/models", headers=lora.headers()).json()
    assert "run-b" not in {m["id"] for m in models["data"]}


async def _stream(
    client: httpx.AsyncClient,
    lora: Lora,
    model: str,
    tokens: int,
    running: asyncio.Event | None = None,
    finishes: tuple[str, ...] = ("length",),
) -> str:
    """A streamed chat on `model`, read to its end (`running` set at its
    first chunk): its text, once its last chunk said why it finished (one
    of `finishes`) and [DONE] came."""
    body = _chat_body(model, stream=True, max_tokens=tokens)
    url = f"{lora.gateway.base_url}/v1/chat/completions"
    text, finish, done = [], None, False
    async with client.stream("POST", url, json=body, headers=lora.headers()) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                for choice in chunk["choices"]:
                    text.append(choice["delta"].get("content") or "")
                    finish = choice.get("finish_reason") or finish
                if running is not None:
                    running.set()
    assert finish in finishes and done, (model, finish, done)
    return "".join(text)


async def _evictions(client: httpx.AsyncClient, lora: Lora) -> float:
    """The neuron's adapter evictions so far, all adapters together."""
    url = f"http://127.0.0.1:{lora.gateway.neuron.metrics_port}/metrics"
    lines = (await client.get(url)).text.splitlines()
    name = "neuraxis_neuron_adapter_evictions_total{"
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


async def test_evictions_while_adapters_stream_break_no_stream(lora: Lora) -> None:
    """Four adapters on an engine that holds two: lora-a streams longest,
    holding one slot, while the three others (two added here) take turns
    on the other, each load evicting an idle adapter while streams run."""
    for adapter, source in (("ev-1", lora.dirs[A]), ("ev-2", lora.dirs[B])):
        body = {"model": MODEL, "id": adapter, "source": str(source)}
        assert _admin(lora, "POST", "/v1/adapters", body).status_code == 200
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            running = asyncio.Event()
            # Long enough that the first eviction comes while it runs even
            # on a crowded machine (loads and tokens slow down together);
            # it may end at the model's end of text instead of the limit.
            long = asyncio.create_task(
                _stream(client, lora, A, 128, running, finishes=("length", "stop"))
            )
            await running.wait()
            before = await _evictions(client, lora)
            turns = [_stream(client, lora, m, 4) for m in (B, "ev-1", "ev-2", B, "ev-1")]
            short = asyncio.gather(*turns)
            deadline = time.monotonic() + TIMEOUT_S
            while await _evictions(client, lora) == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # polled: the first load's eviction
            assert not long.done(), "lora-a's stream ended before any eviction"
            texts = await short
            await long
            evictions = await _evictions(client, lora) - before
    finally:
        for adapter in ("ev-1", "ev-2"):
            _admin(lora, "DELETE", f"/v1/adapters/{adapter}")
    assert texts[0] == texts[3] and texts[1] == texts[4], texts
    assert evictions >= 2, evictions


def test_completions_on_an_adapter(lora: Lora) -> None:
    def complete(model: str) -> str:
        body = {"model": model, "prompt": "The best thing about mornings is", "max_tokens": TOKENS}
        response = _post(lora, "/v1/completions", {**body, "temperature": 0})
        assert response.status_code == 200, response.text
        return str(response.json()["choices"][0]["text"])

    base, adapter = complete(MODEL), complete(B)
    assert base != adapter and complete(B) == adapter


def _respond(lora: Lora, model: str, text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "input": text, "temperature": 0, "max_output_tokens": TOKENS}
    response = _post(lora, "/v1/responses", {**body, **extra})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _output_text(response: dict[str, Any]) -> str:
    return str(response["output"][0]["content"][0]["text"])


def test_a_responses_chain_on_an_adapter(lora: Lora) -> None:
    first = _respond(lora, A, PROMPT)
    assert first["model"] == A and _output_text(first) == _answer(lora, A)
    second = _respond(lora, A, "Say more.", previous_response_id=first["id"])
    assert second["model"] == A and second["status"] in ("completed", "incomplete")
    # The chain's context on the adapter: what a chat with the whole
    # conversation answers.
    messages = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": _output_text(first)},
        {"role": "user", "content": "Say more."},
    ]
    body = {"model": A, "messages": messages, "temperature": 0, "max_tokens": TOKENS}
    chat = _post(lora, "/v1/chat/completions", body)
    assert chat.status_code == 200, chat.text
    assert _output_text(second) == chat.json()["choices"][0]["message"]["content"]


def test_a_background_response_on_an_adapter(lora: Lora) -> None:
    queued = _respond(lora, B, PROMPT, background=True)
    assert queued["status"] in ("queued", "in_progress") and queued["background"] is True
    url = f"{lora.gateway.base_url}/v1/responses/{queued['id']}"
    seen: list[dict[str, Any]] = []

    def ended() -> bool:
        seen.append(httpx.get(url, headers=lora.headers(), timeout=TIMEOUT_S).json())
        return seen[-1]["status"] not in ("queued", "in_progress")

    assert wait_until(ended, timeout_s=TIMEOUT_S, interval_s=0.2), seen[-1]
    done = seen[-1]
    assert done["status"] in ("completed", "incomplete"), done
    assert done["model"] == B and _output_text(done) == _answer(lora, B)


def test_an_adapter_cannot_embed(lora: Lora) -> None:
    response = _post(lora, "/v1/embeddings", {"model": A, "input": "hi"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "model")
    assert A in error["message"]
