"""LoRA adapters through cortex in front of two sim neurons that each hold
one adapter at a time (`--max-adapters 1`): adapters listed as models with
their parent, each answering its own way, an unknown one 404, a key scoped
to one adapter kept off another, requests following the replica that holds
their adapter, concurrent first requests waiting for one load, a Responses
chain on an adapter, and an adapter asked to embed (400)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from harness.gateway import Sim, SimGateway, sim_gateway
from harness.keys import new_key
from harness.polling import wait_until
from harness.procs import cortex_metric

BASE = "sim-base"
ADAPTERS = ("a1", "a2", "a3")
# Long enough that the concurrent requests below all arrive while the
# first one's load runs.
LOAD_S = 0.5


@dataclass(frozen=True)
class LoraStack:
    gateway: SimGateway
    key: str  # anyone's
    a1_only: str  # a key scoped to the adapter a1

    def loads(self, adapter: str) -> float:
        """The adapter's loads over both neurons."""
        return sum(
            cortex_metric(
                f"http://127.0.0.1:{n.metrics_port}",
                "neuraxis_neuron_adapter_loads_total",
                adapter=adapter,
            )
            for n in self.gateway.neurons
        )

    def hits(self, adapter: str, hit: str) -> float:
        return cortex_metric(
            self.gateway.admin_url, "neuraxis_adapter_requests_total", model=adapter, hit=hit
        )


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoraStack]:
    logs = tmp_path_factory.mktemp("lora-logs")
    state = tmp_path_factory.mktemp("lora-state")
    flags = ["--max-adapters", "1", "--sim-adapter-load-s", str(LOAD_S)]
    for adapter in ADAPTERS:
        flags += ["--adapters", f"{adapter}=/adapters/{adapter}"]
    sims = [Sim(BASE, flags), Sim(BASE, flags)]
    key, a1_only = new_key(state, "t"), new_key(state, "t", "--models", "a1")
    cortex_flags = ("--auth", "required", "--state-dir", str(state))
    with sim_gateway(logs, "lora", *cortex_flags, sims=sims) as gateway:
        yield LoraStack(gateway, key, a1_only)


async def _chat(stack: LoraStack, model: str, key: str | None = None) -> httpx.Response:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key or stack.key}"}
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            f"{stack.gateway.base_url}/v1/chat/completions", json=body, headers=headers
        )


def _text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def test_adapters_are_models_with_their_parent(lora: LoraStack) -> None:
    headers = {"Authorization": f"Bearer {lora.key}"}
    listed = httpx.get(f"{lora.gateway.base_url}/v1/models", headers=headers).json()["data"]
    assert {m["id"]: m.get("parent") for m in listed} == {
        BASE: None,
        "a1": BASE,
        "a2": BASE,
        "a3": BASE,
    }
    scoped = {"Authorization": f"Bearer {lora.a1_only}"}
    listed = httpx.get(f"{lora.gateway.base_url}/v1/models", headers=scoped).json()["data"]
    assert [m["id"] for m in listed] == ["a1"]


async def test_each_adapter_answers_its_own_way(lora: LoraStack) -> None:
    assert _text(await _chat(lora, BASE)) == "tok0 tok1"
    assert _text(await _chat(lora, "a3")) == "a3:tok0 a3:tok1"


async def test_an_unknown_adapter_and_one_outside_the_keys_list_are_not_found(
    lora: LoraStack,
) -> None:
    for response in (await _chat(lora, "a9"), await _chat(lora, "a2", lora.a1_only)):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "model_not_found"
    assert _text(await _chat(lora, "a1", lora.a1_only)) == "a1:tok0 a1:tok1"


async def test_requests_follow_the_replica_holding_their_adapter(lora: LoraStack) -> None:
    loads, hits = lora.loads("a1"), lora.hits("a1", "true")
    for _ in range(6):  # one at a time: each within the load bound of its holder
        assert _text(await _chat(lora, "a1")) == "a1:tok0 a1:tok1"
    assert lora.loads("a1") - loads <= 1  # loaded once at most (held since the test above)
    assert lora.hits("a1", "true") - hits >= 5
    # Per adapter: its requests and tokens under its own id.
    admin = lora.gateway.admin_url
    assert cortex_metric(admin, "neuraxis_output_tokens_total", api="chat", model="a1") >= 12
    requests = cortex_metric(
        admin, "neuraxis_requests_total", api="chat", model="a1", outcome="success"
    )
    assert requests >= 6


async def test_concurrent_first_requests_wait_for_one_load(lora: LoraStack) -> None:
    before = lora.loads("a2")
    answers = await asyncio.gather(*(_chat(lora, "a2") for _ in range(3)))
    assert [_text(a) for a in answers] == ["a2:tok0 a2:tok1"] * 3
    assert lora.loads("a2") - before == 1
    # The admin listener lists the adapters and who holds them (Info polls).
    holders = {n.address for n in lora.gateway.neurons}

    def listed() -> dict[str, list[str]]:
        data = httpx.get(f"{lora.gateway.admin_url}/v1/adapters").json()["data"]
        assert {(a["id"], a["parent"]) for a in data} == {(a, BASE) for a in ADAPTERS}
        return {a["id"]: a["held_by"] for a in data}

    assert wait_until(lambda: len(listed()["a2"]) == 1, timeout_s=10)
    assert set(listed()["a2"]) <= holders


async def test_a_responses_chain_on_an_adapter(lora: LoraStack) -> None:
    headers = {"Authorization": f"Bearer {lora.key}"}
    url = f"{lora.gateway.base_url}/v1/responses"
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        first = await client.post(url, json={"model": "a3", "input": "hi", "max_output_tokens": 2})
        assert first.status_code == 200, first.text
        body = {
            "model": "a3",
            "input": "and then?",
            "max_output_tokens": 2,
            "previous_response_id": first.json()["id"],
        }
        second = await client.post(url, json=body)
    assert second.status_code == 200, second.text
    assert second.json()["model"] == "a3"
    assert second.json()["output"][0]["content"][0]["text"] == "a3:tok0 a3:tok1"


async def test_an_adapter_cannot_embed(lora: LoraStack) -> None:
    headers = {"Authorization": f"Bearer {lora.key}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        response = await client.post(
            f"{lora.gateway.base_url}/v1/embeddings", json={"model": "a1", "input": "hi"}
        )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "model"


async def test_an_adapter_added_and_removed_at_run_time(lora: LoraStack) -> None:
    admin = lora.gateway.admin_url
    async with httpx.AsyncClient(timeout=30) as client:
        added = await client.post(
            f"{admin}/v1/adapters", json={"model": BASE, "id": "a4", "source": "/adapters/a4"}
        )
        assert added.status_code == 200, added.text
        assert sorted(added.json()["replicas"]) == sorted(n.address for n in lora.gateway.neurons)
        assert _text(await _chat(lora, "a4")) == "a4:tok0 a4:tok1"
        # vLLM's body: the base is the one model with adapters.
        vllm = await client.post(
            f"{admin}/v1/adapters", json={"lora_name": "a5", "lora_path": "/adapters/a5"}
        )
        assert vllm.status_code == 200 and vllm.json()["parent"] == BASE, vllm.text
        again = await client.post(f"{admin}/v1/adapters", json={"id": "a5", "source": "/x"})
        assert again.status_code == 400 and again.json()["error"]["param"] == "id"
        for adapter in ("a4", "a5"):
            assert (await client.delete(f"{admin}/v1/adapters/{adapter}")).status_code == 200
    gone = await _chat(lora, "a4")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
