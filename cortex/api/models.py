"""GET /v1/models and /v1/models/{id}: what is servable right now (for the
caller's key: a model outside its list is not there), a model scaled to
zero included: it is served after a wake, and its card says "sleeping" or
"waking" (what it serves and its context are known once a replica is up).
A LoRA adapter is a model with a `parent`, its base model's id, as its
neurons report it."""

from __future__ import annotations

from fastapi import APIRouter, Request

from axon.errors import ModelNotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.api.gateway import gateway_of
from cortex.api.route import ApiRoute
from cortex.http.context import context_of
from cortex.schemas.models import ModelCard, ModelList

router = APIRouter(route_class=ApiRoute)


ENDPOINTS = {
    pb.MODEL_TASK_GENERATE: ["/v1/chat/completions", "/v1/completions", "/v1/responses"],
    pb.MODEL_TASK_EMBED: ["/v1/embeddings"],
}


def _card(info: pb.ModelInfo) -> ModelCard:
    return ModelCard(
        id=info.id,
        created=info.created,
        max_context_length=info.max_context_length,
        endpoints=ENDPOINTS.get(info.task, []),
        parent=info.parent or None,
    )


@router.get("/v1/models")
async def list_models(request: Request) -> ModelList:
    principal = context_of(request).principal
    neurons = gateway_of(request).neurons
    cards = [_card(info) for info in neurons.served_models().values()]
    cards += [_asleep(m, waking) for m, waking in neurons.sleeping_models().items()]
    return ModelList(data=[card for card in cards if principal.may_use(card.id)])


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> ModelCard:
    neurons = gateway_of(request).neurons
    info = neurons.served_models().get(model_id)
    sleeping = neurons.sleeping_models()
    if (info is None and model_id not in sleeping) or not context_of(request).principal.may_use(
        model_id
    ):
        raise ModelNotFoundError(f"The model '{model_id}' does not exist.")
    return _card(info) if info is not None else _asleep(model_id, sleeping[model_id])


def _asleep(model_id: str, waking: bool) -> ModelCard:
    return ModelCard(
        id=model_id,
        created=0,
        max_context_length=0,
        endpoints=[],
        state="waking" if waking else "sleeping",
    )
