"""Request caps: how much one request may ask for, checked before any work
is dispatched (issue 12 point 4).

The body limit bounds a request's bytes; these bound what those bytes can
make the neurons do: a conversation of a million one-word messages fits in
16 MiB and makes the chat template loop a million times; a 10 MB JSON
schema is compiled into a grammar; a completions list of 2,000 prompts with
`n = 16` is 32,000 generations. Each cap is a setting (`[caps]`, the
fields below) and each violation a 400 naming the parameter, in the API's own
spelling, before admission, rate limits or routing see the request.

Generation requests are checked in their internal form (`check_generate`,
called by dispatch for chat, completions and Responses alike); the API's
`Surface` names the parameters (cortex/schemas/surfaces.py). Embeddings
and background responses have a check each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, PositiveInt

from axon.errors import InvalidRequestError
from axon.settings import SettingsGroup
from axon.v1 import neuron_pb2 as pb
from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.completions import CompletionRequest
from cortex.schemas.embeddings import EmbeddingRequest
from cortex.schemas.responses import ResponsesRequest
from cortex.schemas.surfaces import ParamNames, Surface


class RequestCaps(SettingsGroup):
    """How much one request may ask for."""

    max_messages: PositiveInt = Field(
        2048,
        description="messages in a chat request, or input items (with the chain they continue) "
        "in a Responses request: the chat template renders every one, on the neuron's CPU",
    )
    max_tools: PositiveInt = Field(128, description="tools in one request (OpenAI's limit, 128)")
    max_stop_sequences: PositiveInt = Field(
        4, description="stop sequences in one request (OpenAI allows 4, the most it takes)"
    )
    max_schema_bytes: PositiveInt = Field(
        64 * 1024,
        description="bytes of a structured output's JSON schema, or of one tool's parameters or "
        "grammar: the engine compiles each into a grammar before the first token",
    )
    max_request_schema_bytes: PositiveInt = Field(
        128 * 1024,
        description="bytes of all the schemas and grammars of one request together (response "
        "format, tools' parameters, custom tools' grammars): tool_choice 'required' compiles "
        "every tool into one grammar, on the engine's few grammar workers (8 schemas of 63 KiB "
        "took xgrammar 13.5 s)",
    )
    max_stop_bytes: PositiveInt = Field(
        1024, description="bytes of each stop sequence: the engine looks for each after every token"
    )
    max_echo_bytes: PositiveInt = Field(
        16 * 1024 * 1024,
        description="bytes a /v1/completions answer with echo repeats of its prompts (prompts "
        "x n): a 7.8 MiB prompt echoed 16 times made a 125 MiB answer",
    )
    max_completion_prompts: PositiveInt = Field(
        128, description="prompts in one /v1/completions list"
    )
    max_prompts_times_n: PositiveInt = Field(
        256,
        description="completions one /v1/completions request makes (prompts x n): each is a "
        "generation in the engine",
    )
    max_embedding_inputs: PositiveInt = Field(
        2048, description="inputs in one /v1/embeddings request (OpenAI's limit, 2048)"
    )
    max_embedding_input_bytes: PositiveInt = Field(
        8 * 1024 * 1024,
        description="bytes of all the inputs of one /v1/embeddings request (a token id counts 4)",
    )
    max_output_entries: PositiveInt = Field(
        524_288,
        description="n x max_tokens x (1 + top_logprobs) of one request (x prompts for a "
        "/v1/completions list; max_tokens unset counts what the neuron generates without it: "
        "its default_max_tokens, at most the model's context): the tokens and "
        "log-probability alternatives its answer may hold. A non-streamed answer is built whole "
        "in cortex's memory, ~55 bytes of JSON an entry: the default keeps it under ~30 MiB",
    )
    max_background_per_tenant: PositiveInt = Field(
        16,
        description="background responses one tenant may have running in one cortex process",
    )


def _too_many(param: str, what: str, count: int, cap: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"Invalid '{param}': {count} {what}; this server takes at most {cap}.", param=param
    )


def _too_large(param: str, what: str, size: int, cap: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"Invalid '{param}': {what} is {size} bytes; this server takes at most {cap}.",
        param=param,
    )


def default_output(model: pb.ModelInfo | None) -> int:
    """What a choice that sets no max_tokens may generate on `model`: the
    neuron's default_max_tokens (neuron/engine/base.py `check_context`
    applies it), at most the model's context; the context where the neuron
    sets no default (0: the model is unknown)."""
    if model is None:
        return 0
    context, default = model.max_context_length, model.default_max_tokens
    return min(default, context) if default else context


def check_generate(
    caps: RequestCaps,
    surface: Surface,
    internals: Sequence[pb.GenerateRequest],
    model: pb.ModelInfo | None,
    tokens_param: str | None = None,
) -> None:
    """The caps of one API request, made of `internals` (several for a
    completions prompt list), against `model` (None: unknown, its context
    not checked)."""
    context = model.max_context_length if model is not None else 0
    names = surface.params
    if names is None:
        raise ValueError(f"{surface.name} is not a generation API")
    first = internals[0]
    if surface.prompt_list:
        if len(internals) > caps.max_completion_prompts:
            raise _too_many("prompt", "prompts", len(internals), caps.max_completion_prompts)
        choices = len(internals) * (first.sampling.n or 1)
        if choices > caps.max_prompts_times_n:
            raise InvalidRequestError(
                f"Invalid 'n': {len(internals)} prompts × n = {choices} completions; this "
                f"server takes at most {caps.max_prompts_times_n} in one request.",
                param="n",
            )
    else:
        check_messages(caps, surface, len(first.messages))
    if len(first.tools) > caps.max_tools:
        raise _too_many("tools", "tools", len(first.tools), caps.max_tools)
    if len(first.sampling.stop) > caps.max_stop_sequences:
        stops = len(first.sampling.stop)
        raise _too_many("stop", "stop sequences", stops, caps.max_stop_sequences)
    longest = max((len(stop.encode()) for stop in first.sampling.stop), default=0)
    if longest > caps.max_stop_bytes:
        raise _too_large("stop", "a stop sequence", longest, caps.max_stop_bytes)
    _check_schemas(caps, names, first)
    param = tokens_param or names.tokens
    wanted = first.sampling.max_tokens if first.sampling.HasField("max_tokens") else None
    if context and wanted is not None and wanted > context:
        raise InvalidRequestError(
            f"Invalid '{param}': {wanted} is more than this model's context of {context} "
            "tokens, prompt included.",
            param=param,
        )
    _check_output(caps, param, internals, wanted or default_output(model))


def check_messages(caps: RequestCaps, surface: Surface, count: int) -> None:
    """Also called before a request is translated: translating a million
    messages is work on the event loop."""
    if count > caps.max_messages:
        names = surface.params
        param = names.messages if names is not None else "messages"
        raise _too_many(param, "messages or items", count, caps.max_messages)


def _check_output(
    caps: RequestCaps, param: str, internals: Sequence[pb.GenerateRequest], tokens: int
) -> None:
    """The answer's size: every choice's tokens and their alternatives (a
    non-streamed answer is built whole in memory)."""
    sampling = internals[0].sampling
    top = sampling.logprobs if sampling.HasField("logprobs") else 0
    size = len(internals) * (sampling.n or 1) * tokens * (1 + top)
    if size > caps.max_output_entries:
        prompts = f"{len(internals)} prompts × " if len(internals) > 1 else ""
        raise InvalidRequestError(
            f"Invalid '{param}': {prompts}n × {param} × (1 + top_logprobs) = {size} tokens and "
            f"alternatives; this server answers at most {caps.max_output_entries} in one "
            f"request. Ask for fewer tokens, choices or alternatives.",
            param=param,
        )


def _check_schemas(caps: RequestCaps, names: ParamNames, request: pb.GenerateRequest) -> None:
    # Schemas become grammars in the engine: their compilation grows with
    # their size, and it happens before any token.
    schema = len(request.response_format.schema_json.encode())
    if schema > caps.max_schema_bytes:
        raise _too_large(names.schema, "the JSON schema", schema, caps.max_schema_bytes)
    total = schema
    for tool in request.tools:
        size = len(tool.parameters_json.encode()) + len(tool.grammar.encode())
        if size > caps.max_schema_bytes:
            raise _too_large("tools", f"tool '{tool.name}''s schema", size, caps.max_schema_bytes)
        total += size
    # Per request too: the engine may compile them all into one grammar.
    if total > caps.max_request_schema_bytes:
        param = "tools" if request.tools else names.schema
        raise _too_large(
            param, "all the request's schemas together", total, caps.max_request_schema_bytes
        )


def check_echo(caps: RequestCaps, prompts: Sequence[str], n: int) -> None:
    """A completions answer with echo holds every prompt n times."""
    size = n * sum(len(prompt.encode()) for prompt in prompts)
    if size > caps.max_echo_bytes:
        raise InvalidRequestError(
            f"Invalid 'echo': the answer would repeat {size} bytes of prompts (prompts × n); "
            f"this server takes at most {caps.max_echo_bytes}.",
            param="echo",
        )


def check_embeddings(caps: RequestCaps, inputs: Sequence[str | Sequence[int]]) -> None:
    if len(inputs) > caps.max_embedding_inputs:
        raise _too_many("input", "inputs", len(inputs), caps.max_embedding_inputs)
    # A token id counts as four bytes: what it costs on the wire to the neuron.
    size = sum(len(i.encode()) if isinstance(i, str) else 4 * len(i) for i in inputs)
    if size > caps.max_embedding_input_bytes:
        raise _too_large("input", "the input", size, caps.max_embedding_input_bytes)


def check_background(caps: RequestCaps, tenant: str, running: Iterable[str]) -> None:
    """`running`: the tenants of the background responses in flight here."""
    count = sum(1 for t in running if t == tenant)
    if count >= caps.max_background_per_tenant:
        raise InvalidRequestError(
            f"Invalid 'background': {count} background responses of yours are running "
            f"here; this server runs at most {caps.max_background_per_tenant} at once. "
            "Wait for one to finish or cancel one.",
            param="background",
        )


@dataclass(frozen=True)
class ListCap:
    """A body's top-level list whose length a cap bounds, checked on the
    parsed JSON before it is validated (`check_lists`)."""

    field: str
    cap: str  # the RequestCaps field
    what: str  # what its items are, in the error


def check_lists(caps: RequestCaps, lists: Sequence[ListCap], body: Any) -> None:
    """Before validation: validating a million messages made a million
    objects (seconds of work, and garbage collections that hold the GIL)
    only to refuse them afterwards. A list of numbers is one prompt of
    token ids, not a list of prompts: left to the later checks."""
    if not isinstance(body, Mapping):
        return
    for rule in lists:
        value = body.get(rule.field)
        if not isinstance(value, list) or (value and isinstance(value[0], int | float)):
            continue
        cap = int(getattr(caps, rule.cap))
        if len(value) > cap:
            raise _too_many(rule.field, rule.what, len(value), cap)


# The lists each body model's caps bound, checked before its validation.
LIST_CAPS: dict[type[BaseModel], tuple[ListCap, ...]] = {
    ChatCompletionRequest: (
        ListCap("messages", "max_messages", "messages or items"),
        ListCap("tools", "max_tools", "tools"),
    ),
    ResponsesRequest: (
        ListCap("input", "max_messages", "messages or items"),
        ListCap("tools", "max_tools", "tools"),
    ),
    CompletionRequest: (ListCap("prompt", "max_completion_prompts", "prompts"),),
    EmbeddingRequest: (ListCap("input", "max_embedding_inputs", "inputs"),),
}
