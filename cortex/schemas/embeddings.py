"""Wire types of the Embeddings API (POST /v1/embeddings)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from cortex.schemas.common import UINT32_END

TokenArray = Annotated[list[Annotated[int, Field(ge=0, lt=UINT32_END)]], Field(min_length=1)]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: (
        Annotated[str, Field(min_length=1)]
        # How many inputs one request may carry is a setting
        # (max_embedding_inputs, cortex/api/caps.py), with a clear 400.
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
        | TokenArray
        | Annotated[list[TokenArray], Field(min_length=1)]
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1, lt=UINT32_END)] | None = None
    user: str | None = None

    def inputs(self) -> list[str | list[int]]:
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and isinstance(value[0], int):
            return [list(value)]
        return list(value)  # type: ignore[arg-type]


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage
