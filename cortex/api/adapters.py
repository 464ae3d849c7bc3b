"""The admin listener's /v1/adapters: the LoRA adapters the neurons serve
(GET: each with its base model and the replicas whose engines hold it, as
each neuron last said in its Info; in cluster mode the controller's list:
every adapter it serves, one no replica holds yet too, with its source,
origin and the replicas serving it), one added on every ready replica of its
base model (POST, our body or vLLM's), one removed (DELETE
/v1/adapters/{id}); and vLLM's own paths for tools that speak them (POST
/v1/load_lora_adapter, /v1/unload_lora_adapter).

In cluster mode a change goes through the controller (`AdapterControl`),
as `neuraxis adapters add | remove` does: it is kept in the controller's
spec, so the replicas the controller starts later serve it too, and a bad
source is refused there before any replica is touched. With static neurons
it goes to the neurons running now, the first alone before the others.
"""

from __future__ import annotations

from fastapi import APIRouter

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api.gateway import AdapterControl, Neurons
from cortex.schemas.adapters import (
    AdapterCard,
    AdapterChange,
    AdapterList,
    AddAdapter,
    RemoveAdapter,
)


def router_for(neurons: Neurons, control: AdapterControl | None = None) -> APIRouter:
    """`control`: the controller's (cluster mode); None: the neurons'."""
    router = APIRouter()

    # A card's cluster-only fields are left out with static neurons.
    @router.get("/v1/adapters", response_model_exclude_none=True)
    async def list_adapters() -> AdapterList:
        if control is not None:
            return AdapterList(data=await control.listing())
        return AdapterList(data=adapter_listing(neurons.neurons()))

    @router.post("/v1/adapters")
    @router.post("/v1/load_lora_adapter")
    async def add_adapter(body: AddAdapter) -> AdapterChange:
        adapter_id, source = body.id or body.lora_name, body.source or body.lora_path
        if adapter_id is None or source is None:
            raise InvalidRequestError(
                "Give the adapter's id and source (or vLLM's lora_name and lora_path).",
                param="id" if adapter_id is None else "source",
            )
        if body.load_inplace or body.is_3d_lora_weight:
            raise InvalidRequestError(
                "Replacing an adapter's weights in place, and 3D LoRA weights, are not "
                "supported: remove the adapter and add it again.",
                param="load_inplace" if body.load_inplace else "is_3d_lora_weight",
            )
        model = body.model or only_base(neurons.neurons())
        if control is not None:
            replicas = await control.add(model, adapter_id, source)
        else:
            replicas = await neurons.add_adapter(model, adapter_id, source)
        return AdapterChange(id=adapter_id, parent=model, replicas=replicas)

    @router.delete("/v1/adapters/{adapter_id}")
    async def remove_adapter(adapter_id: str) -> AdapterChange:
        return await _remove(adapter_id)

    @router.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(body: RemoveAdapter) -> AdapterChange:
        return await _remove(body.lora_name)

    async def _remove(adapter_id: str) -> AdapterChange:
        if control is not None:
            replicas = await control.remove(adapter_id)
        else:
            replicas = await neurons.remove_adapter(adapter_id)
        return AdapterChange(id=adapter_id, replicas=replicas)

    return router


def adapter_listing(neurons: list[tuple[str, pb.InfoResponse | None]]) -> list[AdapterCard]:
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
        AdapterCard(id=a, parent=parents[a], held_by=sorted(held_by[a])) for a in sorted(parents)
    ]


def only_base(neurons: list[tuple[str, pb.InfoResponse | None]]) -> str:
    """The one model whose replicas hold adapters (a body without `model`,
    as vLLM's, which serves one model); else a 400 asking for it."""
    bases: set[str] = {
        m.id
        for _, info in neurons
        if info is not None and info.ready and info.max_adapters
        for m in info.models
        if not m.parent
    }
    if len(bases) != 1:
        names = ", ".join(sorted(bases)) or "none"
        raise InvalidRequestError(
            f"Name the adapter's base model ('model'); models with adapters: {names}.",
            param="model",
        )
    return bases.pop()
