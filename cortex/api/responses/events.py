"""The Responses API's stream events, as typed objects.

The builder makes them, the run numbers them (`sequence_number`) and keeps
them, the SSE edge frames them (`event: <type>` and `data: <json>`), and the
store keeps them as plain dicts, from which `parse_event` makes them again
(replays, orphan recovery). Items and the response object stay dicts: they
are echoed as they are stored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, TypeAdapter

Json = dict[str, Any]

# The events that end a response's stream.
Terminal = Literal[
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.cancelled",
]
TERMINAL: tuple[str, ...] = get_args(Terminal)


class Event(BaseModel):
    type: str
    sequence_number: int = 0  # set by the run that keeps the event


class ResponseLifecycle(Event):
    """response.created / in_progress and the terminal ones, with the whole
    response object as it stands."""

    type: Literal["response.created", "response.in_progress", Terminal]
    response: Json


class OutputItem(Event):
    """An output item opened (added) or finished (done), as it stands."""

    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: Json


class _ItemEvent(Event):
    item_id: str
    output_index: int


class _PartEvent(_ItemEvent):
    content_index: int = 0


class ContentPart(_PartEvent):
    """A message's content part opened (added) or finished (done)."""

    type: Literal["response.content_part.added", "response.content_part.done"]
    part: Json


class _TextDelta(_PartEvent):
    delta: str


class _TextDone(_PartEvent):
    text: str


class OutputTextDelta(_TextDelta):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    logprobs: list[Any] = Field(default_factory=list)


class OutputTextDone(_TextDone):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningTextDelta(_TextDelta):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"


class ReasoningTextDone(_TextDone):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"


class FunctionCallArgumentsDelta(_ItemEvent):
    type: Literal["response.function_call_arguments.delta"] = (
        "response.function_call_arguments.delta"
    )
    delta: str


class FunctionCallArgumentsDone(_ItemEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    arguments: str
    name: str


class CustomToolCallInputDelta(_ItemEvent):
    type: Literal["response.custom_tool_call_input.delta"] = "response.custom_tool_call_input.delta"
    delta: str


class CustomToolCallInputDone(_ItemEvent):
    type: Literal["response.custom_tool_call_input.done"] = "response.custom_tool_call_input.done"
    input: str


class ErrorEvent(Event):
    """The stream's last resort, when even the response's own terminal event
    could not be made (OpenAI's `error` event)."""

    type: Literal["error"] = "error"
    code: str | None
    message: str
    param: str | None = None


ResponseEvent = (
    ResponseLifecycle
    | OutputItem
    | ContentPart
    | OutputTextDelta
    | OutputTextDone
    | ReasoningTextDelta
    | ReasoningTextDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone
    | CustomToolCallInputDelta
    | CustomToolCallInputDone
    | ErrorEvent
)

_EVENTS: TypeAdapter[ResponseEvent] = TypeAdapter(
    Annotated[ResponseEvent, Field(discriminator="type")]
)


def parse_event(stored: Json) -> ResponseEvent:
    return _EVENTS.validate_python(stored)
