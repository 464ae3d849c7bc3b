"""Wire types of the admin listener's /v1/adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class AddAdapter(BaseModel):
    """POST /v1/adapters: ours (`model`, `id`, `source`) or vLLM's
    /v1/load_lora_adapter body (`lora_name`, `lora_path`), for tools that
    speak it; without `model`, the one base model whose replicas hold
    adapters."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, min_length=1)
    id: str | None = Field(None, min_length=1)
    source: str | None = Field(None, min_length=1)
    lora_name: str | None = Field(None, min_length=1)
    lora_path: str | None = Field(None, min_length=1)
    # The rest of vLLM's body: accepted when false (what tools send).
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class RemoveAdapter(BaseModel):
    """vLLM's /v1/unload_lora_adapter body: the adapter's name (its int id,
    vLLM's own number for it, means nothing here and is ignored)."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None


class AdapterCard(BaseModel):
    id: str
    object: str = "adapter"
    parent: str
    # The replicas whose engines hold it now (as they last reported).
    held_by: list[str]
    # Cluster mode only (the controller's list; left out of the answer
    # otherwise): the adapter's directory, whether the deployment spec has
    # it or it was added at run time, and the ready replicas serving it
    # (each loads it onto its engine on demand), holding it or not.
    source: str | None = None
    origin: Literal["spec", "run-time"] | None = None
    served_by: list[str] | None = None


class AdapterList(BaseModel):
    object: str = "list"
    data: list[AdapterCard]


class AdapterChange(BaseModel):
    """What POST and DELETE did: the adapter and the replicas told."""

    id: str
    parent: str | None = None
    replicas: list[str]
