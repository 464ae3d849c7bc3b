"""Translating a Responses API request into the internal request: the checks
only this API has, the conversation rebuilt from the stored chain
(`previous_response_id`), and the GenerateRequest chat completions use too."""

from __future__ import annotations

from axon.errors import InvalidRequestError, NotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.api import params, tools
from cortex.api.responses.items import Item, parse_items, to_messages
from cortex.recording import Recorder
from cortex.schemas.responses import ResponsesRequest, ToolCallItem, ToolOutputItem
from cortex.store.base import ResponseStore, StoredResponse

_MAX_CHAIN = 1000
# The sampling fields the Responses API takes, named as the internal
# SamplingParams names them.
_SAMPLING = ("temperature", "top_p", "frequency_penalty", "presence_penalty")
# The `include` value asking for token logprobs on output_text.
LOGPROBS = "message.output_text.logprobs"


def generation_params(body: ResponsesRequest, recorder: Recorder | None) -> params.Generation:
    """The Responses spelling of the shared parameters, checked (the hosted
    tools left out counted by `recorder`)."""
    params.reject_unsupported(body)
    if body.background and not body.store:
        raise InvalidRequestError(
            "Background responses must be stored ('store': true).", param="background"
        )
    choice = body.tool_choice
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_schema" and fmt.schema_ is None:
        raise InvalidRequestError(
            "'text.format.schema' is required for json_schema.", param="text.format.schema"
        )
    catalog = tools.responses_catalog(body.tools or [], choice, recorder)
    named = None
    mode = choice if isinstance(choice, str) else None
    if choice is not None and not isinstance(choice, str):
        named = catalog.resolve(choice.name or "", custom=choice.type == "custom")
    mode, _ = tools.effective_mode(catalog, mode)
    shared = params.Generation(
        model=body.model,
        sampling=pb.SamplingParams(
            max_tokens=body.max_output_tokens,
            logprobs=logprobs(body),
            **params.same_named(body, _SAMPLING),
        ),
        stream=body.stream,
        tools=catalog.tools,
        tool_mode=mode,
        named_tool=named,
        parallel_tool_calls=body.parallel_tool_calls,
        format=fmt,
        truncate_oldest=body.truncation == "auto",
        priority=params.requested_class(body.priority, body.service_tier),
    )
    params.check(shared)
    return shared


def logprobs(body: ResponsesRequest) -> int | None:
    """How many alternatives per token the neuron returns logprobs with
    (None: no logprobs). As in OpenAI's API, logprobs come only when
    `include` asks for them; `top_logprobs` alone sets the count."""
    if LOGPROBS not in (body.include or []):
        return None
    return body.top_logprobs or 0


def check_call_outputs(conversation: list[Item]) -> None:
    """Every function_call_output (or custom_tool_call_output) must answer a
    call made earlier in the conversation (this request's input or the
    stored chain)."""
    calls: set[str] = set()
    for item in conversation:
        if isinstance(item, ToolCallItem):
            calls.add(item.call_id)
        elif isinstance(item, ToolOutputItem) and item.call_id not in calls:
            raise InvalidRequestError(
                f"No tool call found for function call output with call_id '{item.call_id}'.",
                param="input",
            )


async def history(store: ResponseStore, previous_id: str, tenant: str = "") -> list[Item]:
    """Earlier inputs and outputs of the chain ending at previous_id, oldest
    first. Instructions are not carried over, as in OpenAI's API. Another
    tenant's response is not found, as if it did not exist."""
    chain: list[StoredResponse] = []
    next_id: str | None = previous_id
    while next_id is not None and len(chain) < _MAX_CHAIN:
        record = await store.get(next_id)
        if record is None or record.tenant != tenant:
            raise NotFoundError(
                f"Previous response with id '{next_id}' not found.", param="previous_response_id"
            )
        chain.append(record)
        next_id = record.previous_response_id
    items: list[Item] = []
    for record in reversed(chain):
        items += parse_items(record.input_items)
        items += parse_items(
            [o for o in record.response.get("output", []) if o.get("type") != "reasoning"]
        )
    return items


def to_generate_request(
    shared: params.Generation, instructions: str | None, conversation: list[Item], request_id: str
) -> pb.GenerateRequest:
    """`shared` from `generation_params`, checked before the chain was read."""
    check_call_outputs(conversation)
    messages = to_messages(instructions, conversation)
    return params.internal_request(shared, request_id, messages=messages)
