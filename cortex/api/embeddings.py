"""POST /v1/embeddings: inputs as text or token arrays, floats or base64."""

from __future__ import annotations

import base64
import struct

from fastapi import APIRouter, Request
from fastapi.responses import Response

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api import caps, dispatch
from cortex.api.gateway import gateway_of
from cortex.api.route import ApiRoute
from cortex.schemas.embeddings import EmbeddingData, EmbeddingList, EmbeddingRequest, EmbeddingUsage
from cortex.schemas.surfaces import EMBEDDINGS

router = APIRouter(route_class=ApiRoute)


def to_embed_request(body: EmbeddingRequest, request_id: str) -> pb.EmbedRequest:
    inputs = [
        pb.EmbedInput(text=item)
        if isinstance(item, str)
        else pb.EmbedInput(tokens=pb.TokenIds(ids=item))
        for item in body.inputs()
    ]
    return pb.EmbedRequest(
        request_id=request_id, model=body.model, inputs=inputs, dimensions=body.dimensions
    )


def encode_base64(values: list[float]) -> str:
    """OpenAI's base64 encoding: little-endian float32s."""
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


@router.post("/v1/embeddings")
async def create_embeddings(body: EmbeddingRequest, request: Request) -> Response:
    neurons = gateway_of(request).neurons
    request_id = dispatch.claim(request, EMBEDDINGS)
    internal = to_embed_request(body, request_id)
    dispatch.check_model(request, body.model)  # before anything tells the model exists
    caps.check_embeddings(gateway_of(request).caps, body.inputs())
    neurons.check_task(body.model, pb.MODEL_TASK_EMBED, EMBEDDINGS.path)
    if body.dimensions is not None:
        info = neurons.served_models().get(body.model)
        if info is not None and not info.supports_dimensions:
            raise InvalidRequestError(
                f"The model '{body.model}' does not support the 'dimensions' parameter.",
                param="dimensions",
            )
    response = await dispatch.embed(request, internal)
    # The vectors come from the neuron already typed: build the answer without
    # re-validating thousands of floats, and serialise it with pydantic's
    # compiled encoder (stdlib json is several times slower on long lists).
    data = [
        EmbeddingData.model_construct(
            object="embedding",
            index=i,
            embedding=encode_base64(list(e.values))
            if body.encoding_format == "base64"
            else list(e.values),
        )
        for i, e in enumerate(response.embeddings)
    ]
    result = EmbeddingList.model_construct(
        object="list",
        data=data,
        model=body.model,
        usage=EmbeddingUsage(
            prompt_tokens=response.prompt_tokens, total_tokens=response.prompt_tokens
        ),
    )
    return Response(
        result.model_dump_json(),
        media_type="application/json",
        headers={"X-Request-Id": request_id},
    )
