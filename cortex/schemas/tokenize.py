"""The wire types of POST /tokenize and POST /detokenize, in vLLM's shapes
(vllm/entrypoints/serve/tokenize/protocol.py): a prompt, or chat messages
rendered with the model's chat template, to token ids, and token ids back
to text. vLLM's two request shapes are one model here: `prompt` or
`messages`, with each shape's default for `add_special_tokens`."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import BaseModel, Field, model_validator

from cortex.schemas.chat import ChatMessageIn
from cortex.schemas.tools import ChatTool

# A token id as vLLM accepts one (a non-negative 64-bit integer).
TokenId = Annotated[int, Field(ge=0, le=2**63 - 1)]


class TokenizeRequest(BaseModel):
    model: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = Field(None, min_length=1)
    # vLLM's default: true for a prompt (BOS added), false for messages (the
    # chat template adds what the model needs).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False
    tools: list[ChatTool] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> Self:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either 'prompt' or 'messages'")
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        return self

    @property
    def special_tokens(self) -> bool:
        if self.add_special_tokens is not None:
            return self.add_special_tokens
        return self.prompt is not None


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(BaseModel):
    model: str = Field(min_length=1)
    tokens: list[TokenId]


class DetokenizeResponse(BaseModel):
    prompt: str
