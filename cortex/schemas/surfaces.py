"""The API surfaces cortex serves, each described once: its name (the
`api` label of every metric and log line), the path it is served on, the
prefix of its request ids and what it calls the internal request's parts
in its own errors. Everything that differs between surfaces and is not
their wire types reads it from here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class ParamNames:
    """What an API calls the internal request's parts (its caps' 400s name them)."""

    messages: str  # the conversation (or prompt list)
    tokens: str  # the output cap
    schema: str  # the structured output's JSON schema


@dataclass(frozen=True)
class Surface:
    name: str
    path: str
    id_prefix: str  # separator included: OpenAI's ids differ ("chatcmpl-", "resp_")
    params: ParamNames | None = None  # None: not a generation API
    prompt_list: bool = False  # one request may carry several prompts (each its own stream)

    def new_request_id(self) -> str:
        return f"{self.id_prefix}{uuid.uuid4().hex}"


CHAT = Surface(
    "chat",
    "/v1/chat/completions",
    "chatcmpl-",
    ParamNames("messages", "max_tokens", "response_format.json_schema.schema"),
)
COMPLETIONS = Surface(
    "completions",
    "/v1/completions",
    "cmpl-",
    ParamNames("prompt", "max_tokens", "response_format"),
    prompt_list=True,
)
RESPONSES = Surface(
    "responses",
    "/v1/responses",
    "resp_",
    ParamNames("input", "max_output_tokens", "text.format.schema"),
)
EMBEDDINGS = Surface("embeddings", "/v1/embeddings", "embd-")
# vLLM's tokenizer endpoints (outside /v1, as vLLM serves them; not in SURFACES,
# which lists the OpenAI APIs).
TOKENIZE = Surface("tokenize", "/tokenize", "tokenize-")
DETOKENIZE = Surface("detokenize", "/detokenize", "detokenize-")

SURFACES = (CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES)
_BY_PATH = {s.path: s for s in SURFACES}


def surface_at(path: str) -> Surface | None:
    """The surface whose create path is `path` (None: any other route)."""
    return _BY_PATH.get(path)
