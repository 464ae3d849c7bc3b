"""POST /v1/chat/completions: validate, translate to the internal request
(axon.v1.GenerateRequest), route, and render the neuron's stream as a
chat completion or as chat.completion.chunk events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api import caps, dispatch, params, tools
from cortex.api.answers import deferred, entries, json_answer
from cortex.api.choices import (
    CallState,
    ChoiceState,
    collect,
    finish_reason,
    logprobs_out,
    usage_of,
)
from cortex.api.gateway import gateway_of
from cortex.api.route import ApiRoute
from cortex.api.streams import next_message
from cortex.api.text_chunks import TextChunks
from cortex.http.disconnect import cancel_on_disconnect
from cortex.http.sse import Chunk, chunk_exclusions, chunk_response
from cortex.routing.policy import RouteHints
from cortex.schemas.chat import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessageIn,
    Choice,
    ChunkChoice,
    CustomCallOut,
    CustomToolCallIn,
    CustomToolCallOut,
    FunctionCallOut,
    ToolCallIn,
    ToolCallOut,
)
from cortex.schemas.common import ChoiceLogprobs
from cortex.schemas.surfaces import CHAT
from cortex.schemas.tools import ChatNamedCustomChoice, ChatNamedToolChoice

router = APIRouter(route_class=ApiRoute)


def to_generate_request(body: ChatCompletionRequest, request_id: str) -> pb.GenerateRequest:
    params.reject_unsupported(body)
    shared = _params(body, tools.chat_catalog(body.tools or []))
    params.check(shared)
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequestError(
            "'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs"
        )
    return params.internal_request(shared, request_id, messages=internal_messages(body.messages))


def internal_messages(messages: Sequence[ChatMessageIn]) -> list[pb.ChatMessage]:
    """A chat conversation as the neuron takes it (/tokenize's too)."""
    return [
        pb.ChatMessage(
            role=m.role,
            content=m.text(),
            name=m.name,
            tool_calls=[_call_in(c) for c in m.tool_calls or []],
            tool_call_id=m.tool_call_id,
        )
        for m in messages
    ]


def _call_in(call: ToolCallIn | CustomToolCallIn) -> pb.ToolCall:
    """An earlier call as the model was offered it (a custom tool's input as
    its one argument, see neuron/engine/vllm/prompt.py)."""
    if isinstance(call, CustomToolCallIn):
        arguments = json.dumps({"input": call.custom.input})
        return pb.ToolCall(id=call.id, name=call.custom.name, arguments=arguments)
    return pb.ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)


def _params(body: ChatCompletionRequest, catalog: tools.Catalog) -> params.Generation:
    """Chat's spelling of the shared parameters."""
    choice = body.tool_choice
    named = None
    if isinstance(choice, ChatNamedToolChoice):
        named = catalog.resolve(choice.function.name, custom=False)
    elif isinstance(choice, ChatNamedCustomChoice):
        named = catalog.resolve(choice.custom.name, custom=True)
    return params.Generation(
        model=body.model,
        sampling=params.sampling_of(
            body,
            max_tokens=body.max_completion_tokens or body.max_tokens,
            logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        ),
        stream=body.stream,
        stream_options=body.stream_options is not None,
        tools=catalog.tools,
        tool_mode=None
        if isinstance(choice, ChatNamedToolChoice | ChatNamedCustomChoice)
        else choice,
        named_tool=named,
        parallel_tool_calls=body.parallel_tool_calls,
        priority=params.requested_class(body.priority, body.service_tier),
        format=body.response_format,
    )


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    request_id = dispatch.claim(request, CHAT)
    caps.check_messages(gateway_of(request).caps, CHAT, len(body.messages))
    internal = to_generate_request(body, request_id)
    created = int(time.time())
    hints = RouteHints(prompt_cache_key=body.prompt_cache_key)
    tokens = "max_completion_tokens" if body.max_completion_tokens is not None else None
    started = await dispatch.start(request, [internal], hints, tokens_param=tokens)
    first, stream = started.only
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        forced = internal.tool_choice.mode in (
            pb.TOOL_CHOICE_MODE_REQUIRED,
            pb.TOOL_CHOICE_MODE_NAMED,
        )
        chunker = _Chunker(request_id, created, body.model, include_usage)
        chunks = _chunks(first, stream, chunker, body.n or 1, forced)
        return chunk_response(chunks, request_id, include_usage)
    states, usage = await cancel_on_disconnect(request, collect(first, stream))
    naming = tools.chat_catalog(body.tools or []).naming

    def build() -> ChatCompletion:
        return ChatCompletion(
            id=request_id,
            created=created,
            model=body.model,
            choices=[
                _choice(index, state, bool(body.logprobs), naming)
                for index, state in sorted(states.items())
            ],
            usage=usage_of(usage),
        )

    size = entries(usage.completion_tokens, body.top_logprobs if body.logprobs else None)
    return await json_answer(build, size, {"X-Request-Id": request_id})


def _call_out(call: CallState, naming: tools.CallNaming) -> ToolCallOut | CustomToolCallOut:
    arguments = "".join(call.arguments)
    if naming.of(call.name).custom:
        custom = CustomCallOut(name=call.name, input=naming.custom_input(call.name, arguments))
        return CustomToolCallOut(id=call.id, custom=custom)
    return ToolCallOut(id=call.id, function=FunctionCallOut(name=call.name, arguments=arguments))


def _choice(
    index: int, state: ChoiceState, with_logprobs: bool, naming: tools.CallNaming
) -> Choice:
    calls = [_call_out(c, naming) for _, c in sorted(state.calls.items())]
    text = "".join(state.text)
    message = AssistantMessage(
        content=text if text or not calls else None,
        tool_calls=calls or None,
        reasoning_content="".join(state.reasoning) or None,
    )
    return Choice(
        index=index,
        message=message,
        logprobs=_deferred_logprobs(state.logprobs) if with_logprobs else None,
        finish_reason=finish_reason(state.finish),
    )


def _deferred_logprobs(entries: Sequence[pb.TokenLogprob]) -> ChoiceLogprobs:
    """The logprobs of a whole choice, converted only as they are encoded
    (cortex/api/answers.py): there may be hundreds of thousands."""
    return ChoiceLogprobs.model_construct(content=deferred(entries, logprobs_out), refusal=None)


class _Chunker:
    """Builds chat.completion.chunk objects that share one id and created."""

    def __init__(self, request_id: str, created: int, model: str, include_usage: bool) -> None:
        self._base = {"id": request_id, "created": created, "model": model}
        self.include_usage = include_usage
        self._texts = TextChunks(
            lambda index, text: self.choice(index, {"content": text}),
            chunk_exclusions(include_usage),
        )

    def content(self, index: int, text: str) -> Chunk:
        """A token's chunk: its text, nothing else (encoded, text_chunks.py)."""
        return self._texts.chunk(index, text)

    def choice(
        self,
        index: int,
        delta: dict[str, Any],
        finish: str | None = None,
        logprobs: list[pb.TokenLogprob] | None = None,
    ) -> ChatCompletionChunk:
        choice = ChunkChoice(
            index=index,
            delta=delta,
            finish_reason=finish,
            logprobs=ChoiceLogprobs(content=logprobs_out(logprobs)) if logprobs else None,
        )
        return ChatCompletionChunk(**self._base, choices=[choice])

    def usage(self, usage: pb.Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(**self._base, choices=[], usage=usage_of(usage))


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


async def _chunks(
    first: pb.GenerateResponse,
    rest: AsyncIterator[pb.GenerateResponse],
    chunker: _Chunker,
    n: int,
    forced_tools: bool,
) -> AsyncIterator[list[Chunk]]:
    """The neuron's stream as chunks, one group per neuron message (written
    in one piece, `sse.py`); errors are the stream wrapper's."""
    opening = {"role": "assistant", "content": None if forced_tools else ""}
    group: list[Chunk] = [chunker.choice(index, opening) for index in range(n)]
    response = first
    while True:
        group += _message_chunks(response, chunker)
        if response.HasField("usage"):
            break
        yield group
        group = []
        response = await next_message(rest)
    if chunker.include_usage:
        group.append(chunker.usage(response.usage))
    yield group


def _message_chunks(response: pb.GenerateResponse, chunker: _Chunker) -> list[Chunk]:
    """The chunks of one neuron message, in the order OpenAI sends them."""
    out: list[Chunk] = []
    for delta in response.choices:
        if delta.reasoning:
            out.append(chunker.choice(delta.index, {"reasoning_content": delta.reasoning}))
        if delta.logprobs:
            out.append(
                chunker.choice(delta.index, {"content": delta.text}, logprobs=list(delta.logprobs))
            )
        elif delta.text:
            out.append(chunker.content(delta.index, delta.text))
        for call in delta.tool_calls:
            out += [chunker.choice(delta.index, piece) for piece in _tool_call_deltas(call)]
        if delta.finish_reason:
            out.append(chunker.choice(delta.index, {}, finish_reason(delta.finish_reason)))
    return out
