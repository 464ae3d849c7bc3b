"""GET /v1/models and /v1/models/{id}: what is servable right now (for the
caller's key: a model outside its list is not there)."""

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
    )


@router.get("/v1/models")
async def list_models(request: Request) -> ModelList:
    principal = context_of(request).principal
    served = gateway_of(request).neurons.served_models().values()
    return ModelList(data=[_card(info) for info in served if principal.may_use(info.id)])


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> ModelCard:
    info = gateway_of(request).neurons.served_models().get(model_id)
    if info is None or not context_of(request).principal.may_use(model_id):
        raise ModelNotFoundError(f"The model '{model_id}' does not exist.")
    return _card(info)
