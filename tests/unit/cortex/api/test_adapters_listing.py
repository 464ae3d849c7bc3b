"""The admin listener's adapter listing from the neurons' Info."""

from __future__ import annotations

from axon.v1 import neuron_pb2 as pb
from cortex.api.adapters import adapter_listing


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
    assert listing == [
        {"id": "a", "object": "adapter", "parent": "m", "held_by": ["n1:1", "n2:1"]},
        {"id": "b", "object": "adapter", "parent": "m", "held_by": ["n1:1"]},
    ]
