"""Wire types of the legacy Completions API (POST /v1/completions)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cortex.schemas.chat import StreamOptions
from cortex.schemas.common import CompletionUsage, Stop

UNSUPPORTED_FIELDS = ("suffix", "logit_bias")


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    prompt: str | Annotated[list[str], Field(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's default for this endpoint.
    max_tokens: Annotated[int, Field(ge=1)] | None = 16
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    n: Annotated[int, Field(ge=1, le=16)] | None = None
    best_of: Annotated[int, Field(ge=1, le=1)] | None = None
    seed: int | None = None
    stop: Stop = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    echo: bool = False
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    user: str | None = None

    suffix: Any = None
    logit_bias: Any = None

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "content_filter"] | None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = None
