"""POST /v1/chat/completions: validate, translate to the internal request
(neuraxis.v1.GenerateRequest), route, and render the neuron's stream as a
chat completion or as chat.completion.chunk events."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from cortex.api.disconnect import cancel_on_disconnect
from cortex.api.errors import error_envelope
from cortex.routing.pool import NeuronPool
from cortex.schemas.chat import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    CompletionUsage,
    PromptTokensDetails,
)
from cortex.sse import DONE, data_frame
from neuraxis.errors import InternalError, InvalidRequestError, NeuraxisError, UnavailableError
from neuraxis.v1 import neuron_pb2 as pb

router = APIRouter()

_FINISH = {pb.FINISH_REASON_STOP: "stop", pb.FINISH_REASON_LENGTH: "length"}


def to_generate_request(body: ChatCompletionRequest, request_id: str) -> pb.GenerateRequest:
    unsupported = body.unsupported_field()
    if unsupported:
        raise InvalidRequestError(
            f"'{unsupported}' is not supported by this server yet.", param=unsupported
        )
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is true.",
            param="stream_options",
        )
    sampling = pb.SamplingParams(
        stop=body.stop_list(),
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
    )
    messages = [pb.ChatMessage(role=m.role, content=m.text(), name=m.name) for m in body.messages]
    return pb.GenerateRequest(
        request_id=request_id, model=body.model, messages=messages, sampling=sampling
    )


def finish_reason(response: pb.GenerateResponse) -> str:
    reason = _FINISH.get(response.finish_reason)
    if reason is None:
        # The engine aborted the request (e.g. it was shutting down).
        raise UnavailableError("The model server aborted the request; please retry.")
    return reason


def usage_of(response: pb.GenerateResponse) -> CompletionUsage:
    u = response.usage
    return CompletionUsage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=u.cached_prompt_tokens),
    )


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    pool: NeuronPool = request.app.state.pool
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    internal = to_generate_request(body, request_id)
    created = int(time.time())
    stream = pool.generate(internal)
    # Wait for the first message before answering, so that errors raised
    # before generation starts (bad model, prompt too long, no neuron) get
    # their own HTTP status instead of an error inside a 200 stream.
    first = await anext(stream)
    headers = {"X-Request-Id": request_id}
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunks = _stream(first, stream, request_id, created, body.model, include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    completion = await cancel_on_disconnect(
        request, _complete(first, stream, request_id, created, body.model)
    )
    return JSONResponse(completion.model_dump(), headers=headers)


async def _complete(
    first: pb.GenerateResponse,
    rest: AsyncIterator[pb.GenerateResponse],
    request_id: str,
    created: int,
    model: str,
) -> ChatCompletion:
    parts = [first.text]
    last = first
    while last.finish_reason == pb.FINISH_REASON_UNSPECIFIED:
        last = await anext(rest)
        parts.append(last.text)
    return ChatCompletion(
        id=request_id,
        created=created,
        model=model,
        choices=[
            Choice(
                index=0,
                message=AssistantMessage(content="".join(parts)),
                finish_reason=finish_reason(last),
            )
        ],
        usage=usage_of(last),
    )


async def _stream(
    first: pb.GenerateResponse,
    rest: AsyncIterator[pb.GenerateResponse],
    request_id: str,
    created: int,
    model: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    exclude = None if include_usage else {"usage"}

    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        c = ChatCompletionChunk(
            id=request_id,
            created=created,
            model=model,
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish)],
        )
        # With include_usage every chunk carries "usage": null; without it the
        # key is left out, as OpenAI does.
        return data_frame(c.model_dump_json(exclude=exclude))

    yield chunk({"role": "assistant", "content": ""})
    response = first
    try:
        while True:
            if response.text:
                yield chunk({"content": response.text})
            if response.finish_reason != pb.FINISH_REASON_UNSPECIFIED:
                break
            response = await anext(rest)
        yield chunk({}, finish_reason(response))
        if include_usage:
            final = ChatCompletionChunk(
                id=request_id, created=created, model=model, choices=[], usage=usage_of(response)
            )
            yield data_frame(final.model_dump_json())
    except NeuraxisError as e:
        yield data_frame(error_envelope(e).model_dump_json())
    except StopAsyncIteration:
        yield data_frame(error_envelope(InternalError("The stream ended early.")).model_dump_json())
    except Exception:
        error = InternalError("The server had an error while processing your request.")
        yield data_frame(error_envelope(error).model_dump_json())
    yield DONE
