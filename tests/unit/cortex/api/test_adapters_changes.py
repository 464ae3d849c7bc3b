"""The admin listener's adapter changes: through the controller when cortex
runs with one (an `AdapterControl`), on the neurons otherwise; vLLM's paths
and bodies accepted; refusals in OpenAI's error envelope."""

from __future__ import annotations

import httpx
import pytest

from axon.errors import InvalidRequestError, ModelNotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.admin import create_admin_app
from cortex.schemas.adapters import AdapterCard
from tests.unit.cortex.api.fakes import ScriptedPool


class Neurons(ScriptedPool):
    """One ready neuron of `m` that holds adapters; adds and removes recorded."""

    def __init__(self) -> None:
        super().__init__([])
        self.calls: list[tuple[str, ...]] = []

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        info = pb.InfoResponse(models=[pb.ModelInfo(id="m")], ready=True, max_adapters=2)
        return [("10.0.0.1:50051", info)]

    async def add_adapter(self, model: str, adapter_id: str, source: str) -> list[str]:
        self.calls.append(("neurons.add", model, adapter_id, source))
        return ["10.0.0.1:50051"]

    async def remove_adapter(self, adapter_id: str) -> list[str]:
        self.calls.append(("neurons.remove", adapter_id))
        return ["10.0.0.1:50051"]


class Control:
    """The controller's side, as cluster mode hands it to the admin app."""

    def __init__(self, calls: list[tuple[str, ...]]) -> None:
        self.calls = calls

    async def add(self, model: str, adapter_id: str, source: str) -> list[str]:
        if source == "/srv/big":
            raise InvalidRequestError("/srv/big: rank 32 is above max_rank 16", param="source")
        self.calls.append(("controller.add", model, adapter_id, source))
        return ["10.0.0.9:50051"]

    async def remove(self, adapter_id: str) -> list[str]:
        if adapter_id == "nope":
            raise ModelNotFoundError("The model 'nope' does not exist.")
        self.calls.append(("controller.remove", adapter_id))
        return ["10.0.0.9:50051"]

    async def listing(self) -> list[AdapterCard]:
        return []  # the listing's tests: test_adapters_listing.py


def _client(neurons: Neurons, control: Control | None) -> httpx.AsyncClient:
    app = create_admin_app(neurons, None, control)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin")


@pytest.mark.parametrize("cluster", [False, True])
async def test_ours_and_vllms_bodies_and_paths_add_and_remove(cluster: bool) -> None:
    neurons = Neurons()
    control = Control(neurons.calls) if cluster else None
    where, address = ("controller", "10.0.0.9:50051") if cluster else ("neurons", "10.0.0.1:50051")
    async with _client(neurons, control) as admin:
        ours = {"model": "m", "id": "a", "source": "/srv/a"}
        added = await admin.post("/v1/adapters", json=ours)
        assert added.status_code == 200, added.text
        assert added.json() == {"id": "a", "parent": "m", "replicas": [address]}
        vllm = {"lora_name": "b", "lora_path": "/srv/b", "load_inplace": False}
        assert (await admin.post("/v1/load_lora_adapter", json=vllm)).status_code == 200
        assert (await admin.delete("/v1/adapters/a")).status_code == 200
        unload = {"lora_name": "b", "lora_int_id": 7}
        assert (await admin.post("/v1/unload_lora_adapter", json=unload)).status_code == 200
    assert neurons.calls == [
        (f"{where}.add", "m", "a", "/srv/a"),
        # vLLM's body names no model: the one base whose replicas hold adapters.
        (f"{where}.add", "m", "b", "/srv/b"),
        (f"{where}.remove", "a"),
        (f"{where}.remove", "b"),
    ]


async def test_the_controllers_refusals_are_openai_errors() -> None:
    neurons = Neurons()
    async with _client(neurons, Control(neurons.calls)) as admin:
        refused = await admin.post(
            "/v1/adapters", json={"model": "m", "id": "big", "source": "/srv/big"}
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "source"
        assert "max_rank 16" in refused.json()["error"]["message"]
        missing = await admin.delete("/v1/adapters/nope")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found"
    assert neurons.calls == []


async def test_an_in_place_reload_is_refused_with_the_field() -> None:
    neurons = Neurons()
    async with _client(neurons, None) as admin:
        body = {"lora_name": "a", "lora_path": "/srv/a", "load_inplace": True}
        refused = await admin.post("/v1/load_lora_adapter", json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "load_inplace"
    assert neurons.calls == []
