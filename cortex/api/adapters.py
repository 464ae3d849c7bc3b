"""GET /v1/adapters on the admin listener: the LoRA adapters the neurons
serve, each with its base model and the replicas whose engines hold it, as
each neuron last said in its Info (issue 28's `neuraxis adapters list`;
adding and removing adapters at run time is not here yet)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from axon.v1 import neuron_pb2 as pb
from cortex.api.gateway import Neurons


def router_for(neurons: Neurons) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/adapters")
    async def list_adapters() -> dict[str, Any]:
        return {"object": "list", "data": adapter_listing(neurons.neurons())}

    return router


def adapter_listing(neurons: list[tuple[str, pb.InfoResponse | None]]) -> list[dict[str, Any]]:
    """Each adapter a neuron serves (by id, sorted): its parent and the
    replicas holding it on their engines now."""
    parents: dict[str, str] = {}
    held_by: dict[str, list[str]] = {}
    for address, info in neurons:
        if info is None or not info.ready:
            continue
        for model in info.models:
            if model.parent:
                parents.setdefault(model.id, model.parent)
                held_by.setdefault(model.id, [])
        for adapter in info.adapters:
            held_by.setdefault(adapter, []).append(address)
    return [
        {"id": a, "object": "adapter", "parent": parents[a], "held_by": sorted(held_by[a])}
        for a in sorted(parents)
    ]
