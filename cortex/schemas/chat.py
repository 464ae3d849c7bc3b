"""Pydantic models of the Chat Completions wire types: the request cortex
accepts and the response and stream chunks it sends."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Request fields that OpenAI defines but this server does not serve yet: a
# client that sets them gets a 400 naming the field rather than an answer that
# silently ignores it.
UNSUPPORTED_FIELDS = (
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "response_format",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
    "reasoning_effort",
    "parallel_tool_calls",
)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _only_text_parts(cls, value: Any) -> Any:
        if isinstance(value, list):
            for part in value:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    raise ValueError(
                        f"content parts of type '{kind}' are not supported by this model; "
                        "only 'text' parts are"
                    )
        return value

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    # OpenAI rejects unknown arguments too; a typo should not pass unnoticed.
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None  # a vLLM extension
    n: Annotated[int, Field(ge=1, le=1)] | None = None
    seed: int | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None

    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    response_format: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    logit_bias: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    parallel_tool_calls: Any = None

    def unsupported_field(self) -> str | None:
        """The first field that is set but not served yet, if any."""
        for name in UNSUPPORTED_FIELDS:
            value = getattr(self, name)
            if value is not None and value is not False:
                return name
        return None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[Choice]
    usage: CompletionUsage


class ChunkChoice(BaseModel):
    index: int
    # Only the keys that change: {"role", "content"} first, then {"content"}.
    delta: dict[str, str]
    logprobs: None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
