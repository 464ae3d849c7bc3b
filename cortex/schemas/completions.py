"""Wire types of the legacy Completions API (POST /v1/completions)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from cortex.schemas.chat import StreamOptions
from cortex.schemas.common import CompletionObject, Priority, TokenCount
from cortex.schemas.vllm_sampling import VLLM_UNSUPPORTED, SamplingRequest


class CompletionRequest(SamplingRequest):
    UNSUPPORTED = ("suffix", "logit_bias", *VLLM_UNSUPPORTED)

    model: str = Field(min_length=1)
    prompt: str | Annotated[list[str], Field(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's default for this endpoint.
    max_tokens: TokenCount | None = 16
    best_of: Annotated[int, Field(ge=1, le=1)] | None = None
    echo: bool = False
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    user: str | None = None
    service_tier: str | None = None
    priority: Priority | None = None

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


class Completion(CompletionObject[CompletionChoice]):
    object: Literal["text_completion"] = "text_completion"
