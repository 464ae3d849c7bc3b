"""The parameters every generation API shares, checked once and turned into
the internal request (axon.v1.GenerateRequest) once.

Chat completions, legacy completions and the Responses API spell sampling,
tools, tool choice and output format differently on the wire; each endpoint
translates its own spelling into `Generation` and hands it here. The checks
that only one wire format has (echo with logprobs, background without store)
stay in that endpoint's module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from axon.errors import InvalidRequestError
from axon.priority import CLASSES, DEFAULT_CLASS, PriorityClass
from axon.protomaps import CLASS_TO_PB
from axon.v1 import neuron_pb2 as pb
from cortex.schemas.common import RefusesUnsupported, SamplingFields, stop_list
from cortex.schemas.vllm_sampling import SamplingRequest, VllmSamplingFields

ToolMode = Literal["none", "auto", "required"]
FormatKind = Literal["text", "json_object", "json_schema"]

_TOOL_MODES = {
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}
_SAMPLING = tuple(name for name in SamplingFields.model_fields if name != "stop")
_FORMATS = {
    "text": pb.RESPONSE_FORMAT_KIND_TEXT,
    "json_object": pb.RESPONSE_FORMAT_KIND_JSON_OBJECT,
    "json_schema": pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA,
}


class OutputFormat(Protocol):
    """A request's output format as both APIs give it: its kind, and the
    schema a json_schema format constrains the output to."""

    @property
    def type(self) -> FormatKind: ...

    @property
    def schema_(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Generation:
    """One API request's shared parameters, in the internal spelling."""

    model: str
    sampling: pb.SamplingParams
    stream: bool = False
    stream_options: bool = False  # the request set stream_options
    tools: list[pb.Tool] = field(default_factory=list)
    tool_mode: ToolMode | None = None
    named_tool: str | None = None  # tool_choice naming one function
    parallel_tool_calls: bool | None = None
    format: OutputFormat | None = None
    truncate_oldest: bool = False
    priority: PriorityClass = DEFAULT_CLASS  # asked for; admission caps it


# OpenAI's service tiers as classes; the others ("auto", "default", "scale")
# are the default class.
_TIERS: dict[str, PriorityClass] = {"priority": "interactive", "flex": "batch"}


def requested_class(priority: int | str | None, service_tier: str | None) -> PriorityClass:
    """The class a request asks for: `priority` (vLLM's integer, lower runs
    first: below 0 interactive, 0 default, above 0 batch; or a class's name),
    else `service_tier` (priority: interactive, flex: batch)."""
    if isinstance(priority, int):
        return "interactive" if priority < 0 else "batch" if priority > 0 else "default"
    if priority in CLASSES:
        return priority
    return _TIERS.get(service_tier or "", DEFAULT_CLASS)


def sampling_of(
    body: SamplingRequest, *, max_tokens: int | None, logprobs: int | None
) -> pb.SamplingParams:
    """The internal sampling of chat and legacy completions, which share
    their sampling fields' names with it (vLLM's extensions included)."""
    shared = same_named(body, _SAMPLING)
    sampling = pb.SamplingParams(
        stop=stop_list(body.stop), max_tokens=max_tokens, logprobs=logprobs, **shared
    )
    for name in VllmSamplingFields.SCALARS:
        value = getattr(body, name)
        if value is not None:
            setattr(sampling, name, value)
    for name in VllmSamplingFields.LISTS:
        getattr(sampling, name).extend(getattr(body, name) or [])
    return sampling


def same_named(body: BaseModel, names: Iterable[str]) -> dict[str, Any]:
    """`body`'s fields of these names, which the internal SamplingParams
    spells alike: what each API passes on as it is."""
    return {name: getattr(body, name) for name in names}


def tool(name: str, description: str | None, parameters: Any, strict: bool | None) -> pb.Tool:
    return pb.Tool(
        name=name,
        description=description or "",
        parameters_json=json.dumps(parameters) if parameters else "",
        strict=bool(strict),
    )


def reject_unsupported(body: RefusesUnsupported) -> None:
    """A field OpenAI defines and this server does not serve gets a 400
    naming it, rather than an answer that silently ignores it."""
    if body.unsupported:
        name = body.unsupported[0]
        raise InvalidRequestError(f"'{name}' is not supported by this server.", param=name)


def check(params: Generation) -> None:
    """The rules that span the shared fields, with the field to blame."""
    if params.stream_options and not params.stream:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is true.",
            param="stream_options",
        )
    has_choice = params.tool_mode is not None or params.named_tool is not None
    if has_choice and not params.tools:
        raise InvalidRequestError(
            "'tool_choice' is only allowed when 'tools' are specified.", param="tool_choice"
        )
    if params.named_tool is not None and params.named_tool not in {t.name for t in params.tools}:
        raise InvalidRequestError(
            f"tool_choice names '{params.named_tool}', which is not in 'tools'.",
            param="tool_choice",
        )


def internal_request(
    params: Generation,
    request_id: str,
    *,
    messages: Sequence[pb.ChatMessage] = (),
    prompt: str | None = None,
) -> pb.GenerateRequest:
    """The internal request for a conversation (`messages`) or a raw `prompt`."""
    request = pb.GenerateRequest(request_id=request_id, model=params.model, prompt=prompt)
    request.messages.extend(messages)
    request.sampling.CopyFrom(params.sampling)
    request.tools.extend(params.tools)
    if params.truncate_oldest:
        request.truncate_oldest = True
    if params.priority != DEFAULT_CLASS:
        request.priority = CLASS_TO_PB[params.priority]
    if params.parallel_tool_calls is not None:
        request.parallel_tool_calls = params.parallel_tool_calls
    if params.named_tool is not None:
        request.tool_choice.mode = pb.TOOL_CHOICE_MODE_NAMED
        request.tool_choice.name = params.named_tool
    elif params.tool_mode is not None:
        request.tool_choice.mode = _TOOL_MODES[params.tool_mode]
    if params.format is not None:
        request.response_format.kind = _FORMATS[params.format.type]
        if params.format.schema_ is not None:
            request.response_format.schema_json = json.dumps(params.format.schema_)
    return request
