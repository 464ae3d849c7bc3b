"""Wire types of /v1/models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "neuraxis"
    max_context_length: int
    # The API endpoints this model serves (a neuraxis extension).
    endpoints: list[str]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
