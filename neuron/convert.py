"""Translation between the axon.v1 protobuf messages and the engine's own
types, in both directions. Pure functions, no I/O."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from axon.errors import InvalidRequestError
from axon.priority import DEFAULT_CLASS
from axon.protomaps import PB_TO_CLASS, TASK_TO_PB
from axon.v1 import neuron_pb2 as pb
from neuron.engine.base import (
    EmbedRequest,
    EngineRequest,
    FinishReason,
    Grammar,
    GrammarSyntax,
    Message,
    Output,
    ResponseFormat,
    ResponseFormatKind,
    Sampling,
    ServedModel,
    Tokenized,
    TokenizeRequest,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolKind,
)

_FINISH_TO_PB = {
    FinishReason.STOP: pb.FINISH_REASON_STOP,
    FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
    FinishReason.ABORT: pb.FINISH_REASON_ABORT,
    FinishReason.TOOL_CALLS: pb.FINISH_REASON_TOOL_CALLS,
}
_TOOL_MODE = {
    pb.TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode.AUTO,
    pb.TOOL_CHOICE_MODE_NONE: ToolChoiceMode.NONE,
    pb.TOOL_CHOICE_MODE_AUTO: ToolChoiceMode.AUTO,
    pb.TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode.REQUIRED,
    pb.TOOL_CHOICE_MODE_NAMED: ToolChoiceMode.NAMED,
}
_TOOL_KIND = {
    pb.TOOL_KIND_UNSPECIFIED: ToolKind.FUNCTION,
    pb.TOOL_KIND_FUNCTION: ToolKind.FUNCTION,
    pb.TOOL_KIND_CUSTOM: ToolKind.CUSTOM,
}
_GRAMMAR_SYNTAX = {
    pb.GRAMMAR_SYNTAX_LARK: GrammarSyntax.LARK,
    pb.GRAMMAR_SYNTAX_REGEX: GrammarSyntax.REGEX,
}
_FORMAT_KIND = {
    pb.RESPONSE_FORMAT_KIND_UNSPECIFIED: ResponseFormatKind.TEXT,
    pb.RESPONSE_FORMAT_KIND_TEXT: ResponseFormatKind.TEXT,
    pb.RESPONSE_FORMAT_KIND_JSON_OBJECT: ResponseFormatKind.JSON_OBJECT,
    pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA: ResponseFormatKind.JSON_SCHEMA,
}


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _json(text: str, param: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidRequestError(f"{param} is not valid JSON: {e}", param=param) from None
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{param} must be a JSON object", param=param)
    return value


def _grammar(tool: pb.Tool) -> Grammar | None:
    if not tool.grammar:
        return None
    syntax = _GRAMMAR_SYNTAX.get(tool.grammar_syntax)
    if syntax is None:
        raise InvalidRequestError(
            f"the grammar of tool '{tool.name}' has no syntax (lark or regex)", param="tools"
        )
    return Grammar(syntax, tool.grammar)


def _tool(t: pb.Tool) -> Tool:
    return Tool(
        name=t.name,
        description=t.description,
        parameters=_json(t.parameters_json, "tools.parameters"),
        strict=t.strict,
        kind=_TOOL_KIND[t.kind],
        grammar=_grammar(t),
    )


def sampling(s: pb.SamplingParams) -> Sampling:
    """Sampling's fields are the proto's, by name: a repeated one arrives as a
    tuple, an optional one left unset as Sampling's default (None; n: 1)."""
    given: dict[str, Any] = {}
    for f in fields(Sampling):
        if isinstance(f.default, tuple):
            given[f.name] = tuple(getattr(s, f.name))
        elif s.HasField(f.name):
            given[f.name] = getattr(s, f.name)
    return Sampling(**given)


def _messages(messages: Iterable[pb.ChatMessage]) -> tuple[Message, ...]:
    return tuple(
        Message(
            role=m.role,
            content=m.content,
            name=_optional(m, "name"),
            tool_calls=tuple(ToolCall(c.id, c.name, c.arguments) for c in m.tool_calls),
            tool_call_id=_optional(m, "tool_call_id"),
        )
        for m in messages
    )


def tokenize_request(request: pb.TokenizeRequest) -> TokenizeRequest:
    return TokenizeRequest(
        request_id=request.request_id,
        model=request.model,
        prompt=_optional(request, "prompt"),
        messages=_messages(request.messages),
        tools=tuple(_tool(t) for t in request.tools),
        add_special_tokens=request.add_special_tokens,
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        return_token_strs=request.return_token_strs,
    )


def tokenize_response(result: Tokenized) -> pb.TokenizeResponse:
    return pb.TokenizeResponse(
        tokens=result.tokens, max_model_len=result.max_model_len, token_strs=result.token_strs
    )


def engine_request(request: pb.GenerateRequest) -> EngineRequest:
    messages = _messages(request.messages)
    tools = tuple(_tool(t) for t in request.tools)
    fmt = request.response_format
    return EngineRequest(
        request_id=request.request_id,
        model=request.model,
        messages=messages,
        sampling=sampling(request.sampling),
        tools=tools,
        tool_choice=ToolChoice(_TOOL_MODE[request.tool_choice.mode], request.tool_choice.name),
        response_format=ResponseFormat(
            _FORMAT_KIND[fmt.kind], _json(fmt.schema_json, "response_format.json_schema")
        ),
        prompt=_optional(request, "prompt"),
        parallel_tool_calls=_optional(request, "parallel_tool_calls") is not False,
        truncate_oldest=request.truncate_oldest,
        priority=PB_TO_CLASS.get(request.priority, DEFAULT_CLASS),
    )


def generate_response(output: Output) -> pb.GenerateResponse:
    choices = [
        pb.ChoiceDelta(
            index=c.index,
            text=c.text,
            reasoning=c.reasoning,
            tool_calls=[
                pb.ToolCallDelta(index=t.index, id=t.id, name=t.name, arguments=t.arguments)
                for t in c.tool_calls
            ],
            logprobs=[
                pb.TokenLogprob(
                    token=lp.token,
                    logprob=lp.logprob,
                    bytes=lp.bytes,
                    top=[
                        pb.TopLogprob(token=t.token, logprob=t.logprob, bytes=t.bytes)
                        for t in lp.top
                    ],
                )
                for lp in c.logprobs
            ],
            finish_reason=_FINISH_TO_PB[c.finish_reason]
            if c.finish_reason
            else pb.FINISH_REASON_UNSPECIFIED,
        )
        for c in output.choices
    ]
    usage = output.usage
    if usage is None:
        return pb.GenerateResponse(choices=choices)
    return pb.GenerateResponse(
        choices=choices,
        usage=pb.Usage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_prompt_tokens=usage.cached_prompt_tokens,
        ),
    )


def embed_request(request: pb.EmbedRequest) -> EmbedRequest:
    inputs: list[str | tuple[int, ...]] = []
    for item in request.inputs:
        kind = item.WhichOneof("kind")
        inputs.append(item.text if kind == "text" else tuple(item.tokens.ids))
    return EmbedRequest(
        request_id=request.request_id,
        model=request.model,
        inputs=tuple(inputs),
        dimensions=_optional(request, "dimensions"),
    )


def model_info(model: ServedModel) -> pb.ModelInfo:
    return pb.ModelInfo(
        id=model.id,
        max_context_length=model.max_context_length,
        task=TASK_TO_PB[model.task],
        created=model.created,
        auto_tool_choice=model.auto_tool_choice,
        supports_dimensions=model.supports_dimensions,
        default_max_tokens=model.default_max_tokens,
        parent=model.parent or "",
    )
