"""Pydantic models of the Chat Completions wire types: the request cortex
accepts and the response and stream chunks it sends."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Tag, field_validator, model_validator

from cortex.schemas.common import (
    ChoiceLogprobs,
    CompletionObject,
    CompletionUsage,
    Priority,
    TokenCount,
    joined_text,
    only_text_parts,
)
from cortex.schemas.tools import ChatNamedCustomChoice, ChatTool, by_type
from cortex.schemas.tools import ChatNamedToolChoice as NamedToolChoice
from cortex.schemas.vllm_sampling import VLLM_UNSUPPORTED, SamplingRequest


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class FunctionCallIn(BaseModel):
    name: str
    arguments: str


class ToolCallIn(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


class CustomCallIn(BaseModel):
    name: str
    input: str


class CustomToolCallIn(BaseModel):
    """An earlier call of a custom tool, sent back in the conversation."""

    id: str
    type: Literal["custom"]
    custom: CustomCallIn


# `_content_rules` below, in JSON Schema, for the published schema (a client
# or a fuzzer generating from it should make messages that pass).
_NOT_NULL: dict[str, Any] = {"not": {"type": "null"}}
_MESSAGE_RULES: dict[str, Any] = {
    "allOf": [
        {
            "if": {"properties": {"role": {"const": "tool"}}, "required": ["role"]},
            "then": {
                "required": ["tool_call_id"],
                "properties": {"tool_call_id": {"type": "string", "minLength": 1}},
            },
        },
        {
            "if": {"properties": {"role": {"const": "assistant"}}, "required": ["role"]},
            "then": {
                "anyOf": [
                    {"required": ["content"], "properties": {"content": _NOT_NULL}},
                    {
                        "required": ["tool_calls"],
                        "properties": {"tool_calls": {"type": "array", "minItems": 1}},
                    },
                ]
            },
            "else": {
                "required": ["content"],
                "properties": {"content": _NOT_NULL, "tool_calls": {"type": "null"}},
            },
        },
    ]
}


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_MESSAGE_RULES)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn | CustomToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None

    _only_text_parts = field_validator("content", mode="before")(only_text_parts("text"))

    @model_validator(mode="after")
    def _content_rules(self) -> ChatMessageIn:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message needs the 'tool_call_id' it answers")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("'content' is required unless an assistant message has tool_calls")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry 'tool_calls'")
        return self

    def text(self) -> str:
        return joined_text(self.content)


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatIn(BaseModel):
    # `_schema_given`, in JSON Schema, for the published schema.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"type": {"const": "json_schema"}}, "required": ["type"]},
            "then": {"required": ["json_schema"], "properties": {"json_schema": _NOT_NULL}},
        },
    )
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormatIn:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("'json_schema' is required when type is 'json_schema'")
        return self

    @property
    def schema_(self) -> dict[str, Any] | None:
        """json_schema's schema: what the Responses API's format holds flat."""
        return self.json_schema.schema_ if self.json_schema is not None else None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class ChatCompletionRequest(SamplingRequest):
    UNSUPPORTED = (
        "functions",
        "function_call",
        "logit_bias",
        "audio",
        "modalities",
        "prediction",
        "web_search_options",
        "reasoning_effort",
        *VLLM_UNSUPPORTED,
    )

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: TokenCount | None = None
    max_completion_tokens: TokenCount | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[ChatTool] | None = None
    tool_choice: (
        Literal["none", "auto", "required"]
        | Annotated[
            Annotated[NamedToolChoice, Tag("ChatNamedToolChoice")]
            | Annotated[ChatNamedCustomChoice, Tag("ChatNamedCustomChoice")],
            by_type(("function", NamedToolChoice), ("custom", ChatNamedCustomChoice)),
        ]
        | None
    ) = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormatIn | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    priority: Priority | None = None
    # An affinity key for routing (see RouteHints); not sent to the model.
    prompt_cache_key: str | None = None


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class CustomCallOut(BaseModel):
    name: str
    input: str


class CustomToolCallOut(BaseModel):
    id: str
    type: Literal["custom"] = "custom"
    custom: CustomCallOut


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallOut | CustomToolCallOut] | None = None
    # What a reasoning model thought before answering (vLLM's field name);
    # left out for models that do not reason.
    reasoning_content: str | None = Field(default=None, exclude_if=lambda v: v is None)


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str


class ChatCompletion(CompletionObject[Choice]):
    object: Literal["chat.completion"] = "chat.completion"
    usage: CompletionUsage


class ChunkChoice(BaseModel):
    index: int
    # Only the keys that change: {"role", "content"} first, then {"content"}
    # or {"tool_calls"}; {} on the finishing chunk.
    delta: dict[str, Any]
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(CompletionObject[ChunkChoice]):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
