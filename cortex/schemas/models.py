"""Wire types of /v1/models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "neuraxis"
    max_context_length: int
    # The API endpoints this model serves (a neuraxis extension).
    endpoints: list[str]
    # Only for a model scaled to zero (a neuraxis extension): "sleeping", or
    # "waking" while a request wakes it; its requests are served after the wake.
    state: Literal["sleeping", "waking"] | None = Field(None, exclude_if=lambda v: v is None)
    # A LoRA adapter's base model (as vLLM's server says it); absent for a
    # model of its own.
    parent: str | None = Field(None, exclude_if=lambda v: v is None)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
