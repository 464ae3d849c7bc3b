"""POST /v1/chat/completions: validate, translate to the internal request
(neuraxis.core.v1.GenerateRequest), route, and render the neuron's stream as a
chat completion or as chat.completion.chunk events."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from cortex.api import generation
from cortex.api.choices import ChoiceState, collect, finish_reason, logprobs_out, usage_of
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
    FunctionCallOut,
    NamedToolChoice,
    ToolCallOut,
)
from cortex.schemas.common import ChoiceLogprobs, stop_list
from cortex.sse import DONE, data_frame
from neuraxis.core.errors import InternalError, InvalidRequestError, NeuraxisError
from neuraxis.core.v1 import neuron_pb2 as pb

router = APIRouter()


def to_generate_request(body: ChatCompletionRequest, request_id: str) -> pb.GenerateRequest:
    _check(body)
    sampling = pb.SamplingParams(
        stop=stop_list(body.stop),
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        n=body.n,
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
    )
    messages = [
        pb.ChatMessage(
            role=m.role,
            content=m.text(),
            name=m.name,
            tool_calls=[
                pb.ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in m.tool_calls or []
            ],
            tool_call_id=m.tool_call_id,
        )
        for m in body.messages
    ]
    tools = [
        generation.tool(f.name, f.description, f.parameters, f.strict)
        for f in (t.function for t in body.tools or [])
    ]
    request = pb.GenerateRequest(
        request_id=request_id, model=body.model, messages=messages, sampling=sampling, tools=tools
    )
    choice = body.tool_choice
    named = choice.function.name if isinstance(choice, NamedToolChoice) else None
    mode = None if isinstance(choice, NamedToolChoice) else choice
    generation.set_tool_choice(request, mode, named, body.parallel_tool_calls)
    if body.response_format is not None:
        schema = body.response_format.json_schema
        generation.set_format(
            request, body.response_format.type, schema.schema_ if schema else None
        )
    return request


def _check(body: ChatCompletionRequest) -> None:
    """Rules that span fields, with the field to blame."""
    unsupported = body.unsupported_field()
    if unsupported:
        raise InvalidRequestError(
            f"'{unsupported}' is not supported by this server.", param=unsupported
        )
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is true.",
            param="stream_options",
        )
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequestError(
            "'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs"
        )
    if body.tool_choice is not None and not body.tools:
        raise InvalidRequestError(
            "'tool_choice' is only allowed when 'tools' are specified.", param="tool_choice"
        )
    if isinstance(body.tool_choice, NamedToolChoice):
        names = {t.function.name for t in body.tools or []}
        if body.tool_choice.function.name not in names:
            raise InvalidRequestError(
                f"tool_choice names '{body.tool_choice.function.name}', which is not in 'tools'.",
                param="tool_choice",
            )


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    pool: NeuronPool = request.app.state.pool
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    internal = to_generate_request(body, request_id)
    pool.check_task(body.model, pb.MODEL_TASK_GENERATE, "/v1/chat/completions")
    created = int(time.time())
    (stream,) = generation.dispatch(request, "chat", body.model, request_id, [internal])
    # Wait for the first message before answering, so that errors raised
    # before generation starts (bad model, prompt too long, no neuron) get
    # their own HTTP status instead of an error inside a 200 stream.
    first = await anext(stream)
    headers = {"X-Request-Id": request_id}
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        forced = internal.tool_choice.mode in (
            pb.TOOL_CHOICE_MODE_REQUIRED,
            pb.TOOL_CHOICE_MODE_NAMED,
        )
        chunks = _stream(
            first,
            stream,
            _Chunker(request_id, created, body.model, include_usage),
            body.n or 1,
            forced,
        )
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    states, usage = await cancel_on_disconnect(request, collect(first, stream))
    completion = ChatCompletion(
        id=request_id,
        created=created,
        model=body.model,
        choices=[
            _choice(index, state, bool(body.logprobs)) for index, state in sorted(states.items())
        ],
        usage=usage_of(usage),
    )
    return JSONResponse(completion.model_dump(), headers=headers)


def _choice(index: int, state: ChoiceState, with_logprobs: bool) -> Choice:
    calls = [
        ToolCallOut(id=c.id, function=FunctionCallOut(name=c.name, arguments="".join(c.arguments)))
        for _, c in sorted(state.calls.items())
    ]
    text = "".join(state.text)
    message = AssistantMessage(
        content=text if text or not calls else None,
        tool_calls=calls or None,
        reasoning_content="".join(state.reasoning) or None,
    )
    return Choice(
        index=index,
        message=message,
        logprobs=ChoiceLogprobs(content=logprobs_out(state.logprobs)) if with_logprobs else None,
        finish_reason=finish_reason(state.finish),
    )


class _Chunker:
    """Frames chat.completion.chunk events that share one id and created."""

    def __init__(self, request_id: str, created: int, model: str, include_usage: bool) -> None:
        self._base = {"id": request_id, "created": created, "model": model}
        self.include_usage = include_usage
        # With include_usage every chunk carries "usage": null; without it the
        # key is left out, as OpenAI does.
        self._exclude = None if include_usage else {"usage"}

    def choice(
        self,
        index: int,
        delta: dict[str, Any],
        finish: str | None = None,
        logprobs: list[pb.TokenLogprob] | None = None,
    ) -> bytes:
        choice = ChunkChoice(
            index=index,
            delta=delta,
            finish_reason=finish,
            logprobs=ChoiceLogprobs(content=logprobs_out(logprobs)) if logprobs else None,
        )
        chunk = ChatCompletionChunk(**self._base, choices=[choice])  # type: ignore[arg-type]
        return data_frame(chunk.model_dump_json(exclude=self._exclude))

    def usage(self, usage: pb.Usage) -> bytes:
        chunk = ChatCompletionChunk(**self._base, choices=[], usage=usage_of(usage))  # type: ignore[arg-type]
        return data_frame(chunk.model_dump_json())


def _tool_call_deltas(call: pb.ToolCallDelta) -> list[dict[str, Any]]:
    """A call's first delta carries id, type and name with empty arguments;
    argument fragments follow in their own deltas."""
    out: list[dict[str, Any]] = []
    if call.id:
        out.append(
            {
                "tool_calls": [
                    {
                        "index": call.index,
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
    if call.arguments:
        out.append(
            {"tool_calls": [{"index": call.index, "function": {"arguments": call.arguments}}]}
        )
    return out


async def _stream(
    first: pb.GenerateResponse,
    rest: AsyncIterator[pb.GenerateResponse],
    chunker: _Chunker,
    n: int,
    forced_tools: bool,
) -> AsyncIterator[bytes]:
    for index in range(n):
        yield chunker.choice(index, {"role": "assistant", "content": None if forced_tools else ""})
    response = first
    try:
        while True:
            for delta in response.choices:
                if delta.reasoning:
                    yield chunker.choice(delta.index, {"reasoning_content": delta.reasoning})
                if delta.text or delta.logprobs:
                    yield chunker.choice(
                        delta.index, {"content": delta.text}, logprobs=list(delta.logprobs)
                    )
                for call in delta.tool_calls:
                    for piece in _tool_call_deltas(call):
                        yield chunker.choice(delta.index, piece)
                if delta.finish_reason:
                    yield chunker.choice(delta.index, {}, finish_reason(delta.finish_reason))
            if response.HasField("usage"):
                break
            response = await anext(rest)
        if chunker.include_usage:
            yield chunker.usage(response.usage)
    except NeuraxisError as e:
        yield data_frame(error_envelope(e).model_dump_json())
    except StopAsyncIteration:
        yield data_frame(error_envelope(InternalError("The stream ended early.")).model_dump_json())
    except Exception:
        error = InternalError("The server had an error while processing your request.")
        yield data_frame(error_envelope(error).model_dump_json())
    yield DONE
