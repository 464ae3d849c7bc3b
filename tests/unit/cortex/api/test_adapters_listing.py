"""The admin listener's adapter listing from the neurons' Info."""

from __future__ import annotations

import httpx
import pytest

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.admin import create_admin_app
from cortex.api.adapters import adapter_listing, only_base
from cortex.schemas.adapters import AdapterCard
from tests.unit.cortex.api.fakes import ScriptedPool


def _info(held: list[str], ready: bool = True) -> pb.InfoResponse:
    models = [
        pb.ModelInfo(id="m"),
        pb.ModelInfo(id="a", parent="m"),
        pb.ModelInfo(id="b", parent="m"),
    ]
    return pb.InfoResponse(models=models, adapters=held, ready=ready)


def test_each_adapter_with_its_parent_and_the_replicas_holding_it() -> None:
    listing = adapter_listing(
        [
            ("n2:1", _info(["a"])),
            ("n1:1", _info(["a", "b"])),
            ("n3:1", None),
            ("n4:1", _info(["b"], ready=False)),
        ]
    )
    assert [card.model_dump(exclude_none=True) for card in listing] == [
        {"id": "a", "object": "adapter", "parent": "m", "held_by": ["n1:1", "n2:1"]},
        {"id": "b", "object": "adapter", "parent": "m", "held_by": ["n1:1"]},
    ]


def test_a_body_without_model_takes_the_one_base_with_adapters() -> None:
    with_lora = _info([])
    with_lora.max_adapters = 2
    other = pb.InfoResponse(models=[pb.ModelInfo(id="e")], ready=True)
    assert only_base([("n1:1", with_lora), ("n2:1", other)]) == "m"
    with pytest.raises(InvalidRequestError, match="models with adapters: none"):
        only_base([("n2:1", other)])


class _Neurons(ScriptedPool):
    """One ready neuron serving adapters a (held) and b of `m`."""

    def __init__(self) -> None:
        super().__init__([])

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        return [("n1:1", _info(["a"]))]


class _Control:
    """The controller's side: it serves `a` and `legal`, which no replica
    serves yet (its base is scaled to zero)."""

    async def add(self, model: str, adapter_id: str, source: str) -> list[str]:
        raise AssertionError("not asked here")

    async def remove(self, adapter_id: str) -> list[str]:
        raise AssertionError("not asked here")

    async def listing(self) -> list[AdapterCard]:
        return [
            AdapterCard(
                id="a",
                parent="m",
                held_by=["n1:1"],
                source="/srv/a",
                origin="spec",
                served_by=["n1:1"],
            ),
            AdapterCard(
                id="legal", parent="m", held_by=[], source="/srv/l", origin="run-time", served_by=[]
            ),
        ]


async def _listed(control: _Control | None) -> list[dict[str, object]]:
    app = create_admin_app(_Neurons(), None, control)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as admin:
        answer = await admin.get("/v1/adapters")
    assert answer.status_code == 200, answer.text
    assert answer.json()["object"] == "list"
    data: list[dict[str, object]] = answer.json()["data"]
    return data


async def test_static_neurons_list_as_before_without_the_cluster_fields() -> None:
    assert await _listed(None) == [
        {"id": "a", "object": "adapter", "parent": "m", "held_by": ["n1:1"]},
        {"id": "b", "object": "adapter", "parent": "m", "held_by": []},
    ]


async def test_cluster_mode_lists_the_controller_s_adapters_one_no_replica_serves_too() -> None:
    listed = await _listed(_Control())
    assert [a["id"] for a in listed] == ["a", "legal"]
    assert listed[1] == {
        "id": "legal",
        "object": "adapter",
        "parent": "m",
        "held_by": [],
        "source": "/srv/l",
        "origin": "run-time",
        "served_by": [],
    }
