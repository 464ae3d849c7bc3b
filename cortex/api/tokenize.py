"""POST /tokenize and POST /detokenize: vLLM's tokenizer endpoints, served
by a replica of the model (the neuron's Tokenize and Detokenize calls), with
the same authentication, key model scoping, limits and error envelope as the
/v1 routes. cortex never tokenizes: the neuron owns the model's tokenizer
and chat template."""

from __future__ import annotations

from fastapi import APIRouter, Request

from axon.v1 import neuron_pb2 as pb
from cortex.api import dispatch, tools
from cortex.api.chat import internal_messages
from cortex.api.gateway import gateway_of
from cortex.api.route import ApiRoute
from cortex.schemas.surfaces import DETOKENIZE, TOKENIZE
from cortex.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

router = APIRouter(route_class=ApiRoute)


def to_tokenize_request(body: TokenizeRequest, request_id: str) -> pb.TokenizeRequest:
    internal = pb.TokenizeRequest(
        request_id=request_id,
        model=body.model,
        prompt=body.prompt,
        add_special_tokens=body.special_tokens,
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=body.continue_final_message,
        return_token_strs=body.return_token_strs,
    )
    if body.messages is not None:
        internal.messages.extend(internal_messages(body.messages))
        internal.tools.extend(tools.chat_catalog(body.tools or []).tools)
    return internal


def from_tokenize_response(answer: pb.TokenizeResponse, strs: bool) -> TokenizeResponse:
    tokens = list(answer.tokens)
    return TokenizeResponse(
        count=len(tokens),
        max_model_len=answer.max_model_len,
        tokens=tokens,
        token_strs=list(answer.token_strs) if strs else None,
    )


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    internal = to_tokenize_request(body, dispatch.claim(request, TOKENIZE))
    neurons = gateway_of(request).neurons
    answer = await dispatch.unary(
        request, body.model, lambda hints: neurons.tokenize(internal, hints)
    )
    return from_tokenize_response(answer, body.return_token_strs)


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    request_id = dispatch.claim(request, DETOKENIZE)
    internal = pb.DetokenizeRequest(request_id=request_id, model=body.model, tokens=body.tokens)
    neurons = gateway_of(request).neurons
    answer = await dispatch.unary(
        request, body.model, lambda hints: neurons.detokenize(internal, hints)
    )
    return DetokenizeResponse(prompt=answer.prompt)
