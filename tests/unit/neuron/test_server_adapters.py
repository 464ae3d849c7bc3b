"""A sim neuron with LoRA adapters through its gRPC server: each adapter a
model with its parent in Info, what it holds in Info and Load, an
adapter's own answer, LoadAdapter and UnloadAdapter."""

from __future__ import annotations

import pytest

from axon.adapters import AdapterSource
from axon.errors import InvalidRequestError, ModelNotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import NeuronClient
from neuron.engine.sim import SimEngine, SimOptions
from tests.unit.neuron.sim_neuron import sim_neuron_client


def _engine(max_adapters: int = 1) -> SimEngine:
    adapters = (AdapterSource("a1", "/adapters/a1"), AdapterSource("a2", "/adapters/a2"))
    return SimEngine(
        SimOptions(served_id="m", ttft_s=0, itl_s=0, max_adapters=max_adapters, adapters=adapters)
    )


async def _text(client: NeuronClient, model: str) -> str:
    request = pb.GenerateRequest(
        request_id="r",
        model=model,
        messages=[pb.ChatMessage(role="user", content="hi")],
        sampling=pb.SamplingParams(max_tokens=2),
    )
    out = [c.text async for r in client.generate(request, timeout=10) for c in r.choices]
    return "".join(out)


async def test_adapters_are_models_with_their_parent() -> None:
    async with sim_neuron_client(_engine()) as client:
        info = await client.info(timeout=5)
    assert [(m.id, m.parent) for m in info.models] == [("m", ""), ("a1", "m"), ("a2", "m")]
    assert list(info.adapters) == [] and info.max_adapters == 1  # none held yet


async def test_each_adapter_answers_its_own_way_and_one_is_held_at_a_time() -> None:
    async with sim_neuron_client(_engine(max_adapters=1)) as client:
        assert await _text(client, "m") == "tok0 tok1"
        assert await _text(client, "a1") == "a1:tok0 a1:tok1"
        assert list((await client.load(timeout=5)).adapters) == ["a1"]
        assert await _text(client, "a2") == "a2:tok0 a2:tok1"
        assert list((await client.load(timeout=5)).adapters) == ["a2"]
        assert list((await client.info(timeout=5)).adapters) == ["a2"]


async def test_load_adapter_serves_a_new_one_and_unload_removes_it() -> None:
    async with sim_neuron_client(_engine(max_adapters=2)) as client:
        await client.load_adapter("a3", "/adapters/a3", timeout=5)
        assert list((await client.load(timeout=5)).adapters) == ["a3"]
        assert await _text(client, "a3") == "a3:tok0 a3:tok1"
        await client.unload_adapter("a3", timeout=5)
        assert "a3" not in [m.id for m in (await client.info(timeout=5)).models]
        with pytest.raises(ModelNotFoundError, match="'a3'"):
            await _text(client, "a3")


async def test_a_neuron_without_lora_refuses_load_adapter() -> None:
    async with sim_neuron_client(SimEngine(SimOptions(served_id="m"))) as client:
        with pytest.raises(InvalidRequestError, match="serves no LoRA adapters"):
            await client.load_adapter("a", "/adapters/a", timeout=5)
