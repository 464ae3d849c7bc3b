"""Wire types shared by several OpenAI surfaces."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

Stop = str | Annotated[list[str], Field(max_length=4)] | None


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class TopLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprobOut]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprobOut] | None
    refusal: None = None


def stop_list(stop: Stop) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
