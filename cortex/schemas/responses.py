"""Wire types of the Responses API (POST /v1/responses): the request, and
the input items it may carry. The response object and the stream events are
built in cortex/api/responses/ from these."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cortex.schemas.common import (
    Priority,
    RefusesUnsupported,
    TokenCount,
    joined_text,
    only_text_parts,
)
from cortex.schemas.tools import ResponsesTool, ResponsesToolChoice

# The content parts a Responses message or tool output may carry.
_TEXT_PARTS = ("input_text", "output_text")


class TextContent(BaseModel):
    type: Literal["input_text", "output_text"]
    text: str
    # output_text parts echoed back from an earlier response carry these.
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class MessageItem(BaseModel):
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[TextContent]
    status: str | None = None

    _only_text = field_validator("content", mode="before")(only_text_parts(*_TEXT_PARTS))

    def text(self) -> str:
        return joined_text(self.content)


class _CallPart(BaseModel):
    """An item of a tool call: the call, or what it returned."""

    type: str
    id: str | None = None
    call_id: str


class _Call(_CallPart):
    """A call of a tool by the model, as it comes back in input."""

    name: str
    # The namespace tool the function belongs to, if any.
    namespace: str | None = None


class FunctionCallItem(_Call):
    type: Literal["function_call"]
    arguments: str
    status: str | None = None


class CustomToolCallItem(_Call):
    """A call of a custom tool: its input is free text."""

    type: Literal["custom_tool_call"]
    input: str
    status: str | None = None


def _output_text(value: Any) -> Any:
    # A tool's output may be a list of content parts; the model reads text.
    if isinstance(value, list):
        only_text_parts(*_TEXT_PARTS)(value)
        return "".join(str(part.get("text", "")) for part in value)
    return value


class _CallOutput(_CallPart):
    """What a tool call returned, as the client sends it back."""

    output: str
    status: str | None = None

    _text_parts = field_validator("output", mode="before")(_output_text)


class FunctionCallOutputItem(_CallOutput):
    type: Literal["function_call_output"]


class CustomToolCallOutputItem(_CallOutput):
    type: Literal["custom_tool_call_output"]


class ReasoningItem(BaseModel):
    """Accepted in input and not sent to the model (as OpenAI does for
    reasoning that is not its own)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["reasoning"]
    id: str | None = None


AnyItem = (
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | CustomToolCallItem
    | CustomToolCallOutputItem
    | ReasoningItem
)
InputItem = Annotated[AnyItem, Field(discriminator="type")]
# A call the model made, and the answer to one, whichever kind the tool is.
ToolCallItem = FunctionCallItem | CustomToolCallItem
ToolOutputItem = FunctionCallOutputItem | CustomToolCallOutputItem


class TextFormat(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(BaseModel):
    format: TextFormat | None = None


class ReasoningConfig(BaseModel):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(RefusesUnsupported):
    model_config = ConfigDict(extra="forbid")
    UNSUPPORTED = ("conversation", "prompt")

    model: str = Field(min_length=1)
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: TokenCount | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: ResponsesToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    store: bool = True
    previous_response_id: str | None = None
    background: bool = False
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    stream: bool = False
    include: list[str] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    # Function calls past this many in one response are dropped.
    max_tool_calls: Annotated[int, Field(ge=0)] | None = None
    # Open Responses' sampling penalties (the openai SDK does not send them).
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    # An affinity key for routing (requests sharing it share a neuron, so
    # their common prefix is cached there), kept on the response.
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    # Kept on the response; this server serves one tier, answered "default".
    safety_identifier: str | None = None
    service_tier: str | None = None
    priority: Priority | None = None  # vLLM's extension
    # The client's own annotations (Codex sends them): kept with the
    # stored response, never sent to the model.
    client_metadata: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _typed_items(cls, value: Any) -> Any:
        # A message may leave out "type" (OpenAI's "easy input message").
        if isinstance(value, list):
            return [
                {**item, "type": "message"}
                if isinstance(item, dict) and "type" not in item and "role" in item
                else item
                for item in value
            ]
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > 16:
            raise ValueError("metadata holds at most 16 pairs")
        for key, item in value.items():
            if len(key) > 64:
                raise ValueError(f"metadata key '{key[:20]}...' is longer than 64 characters")
            if len(item) > 512:
                raise ValueError(f"metadata value of '{key}' is longer than 512 characters")
        return value

    def items(self) -> list[AnyItem]:
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)
