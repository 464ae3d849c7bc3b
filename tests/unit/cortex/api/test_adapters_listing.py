"""The admin listener's adapter listing from the neurons' Info."""

from __future__ import annotations

import pytest

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api.adapters import adapter_listing, only_base


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
    assert [card.model_dump() for card in listing] == [
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
