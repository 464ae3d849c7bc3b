"""The output items of the model's tool calls: `function_call` (with
`namespace` when the function came from a namespace tool) or
`custom_tool_call` (free-form `input`), and their argument or input events.

The builder (builder.py) keeps the calls' order and state; what a call
looks like on the wire lives here, named back through the request's
`tools.CallNaming`. A custom call the model was not forced to make came as
the JSON arguments `{"input": ...}` of the function the model was offered,
so its input is known whole only when the call ends: it is sent then, as
one delta and the done event. A forced one streams as it comes.
"""

from __future__ import annotations

from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.events import (
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    Json,
    ResponseEvent,
)
from cortex.api.responses.items import new_id
from cortex.api.tools import CallNaming, model_name

CUSTOM = "custom_tool_call"


def open_item(naming: CallNaming, call: pb.ToolCallDelta) -> Json:
    """The item of a call's first delta, in progress."""
    offered = naming.of(call.name)
    call_id = call.id or new_id("call")
    item: Json
    if offered.custom:
        item = {"type": CUSTOM, "id": new_id("ctc"), "call_id": call_id, "name": offered.name}
        item["input"] = ""
    else:
        item = {"type": "function_call", "id": new_id("fc"), "call_id": call_id}
        item |= {"name": offered.name, "arguments": ""}
    if offered.namespace:
        item["namespace"] = offered.namespace
    item["status"] = "in_progress"
    return item


def _model_name(item: Json) -> str:
    return model_name(item["name"], item.get("namespace"))


def delta_events(
    naming: CallNaming, item: Json, output_index: int, arguments: str
) -> list[ResponseEvent]:
    """The events of a piece of a call's arguments (nothing yet for a custom
    call whose input comes whole at the end)."""
    if item["type"] != CUSTOM:
        return [
            FunctionCallArgumentsDelta(
                item_id=item["id"], output_index=output_index, delta=arguments
            )
        ]
    if _model_name(item) == naming.forced_custom:
        return [
            CustomToolCallInputDelta(item_id=item["id"], output_index=output_index, delta=arguments)
        ]
    return []


def close_events(
    naming: CallNaming, item: Json, output_index: int, pieces: list[str], status: str
) -> list[ResponseEvent]:
    """Complete the item (arguments or input, status) and return its last
    events before output_item.done."""
    arguments = "".join(pieces)
    item["status"] = status
    if item["type"] != CUSTOM:
        item["arguments"] = arguments
        return [
            FunctionCallArgumentsDone(
                item_id=item["id"],
                output_index=output_index,
                arguments=arguments,
                name=item["name"],
            )
        ]
    name = _model_name(item)
    item["input"] = naming.custom_input(name, arguments)
    events: list[ResponseEvent] = []
    if name != naming.forced_custom and item["input"]:
        events.append(
            CustomToolCallInputDelta(
                item_id=item["id"], output_index=output_index, delta=item["input"]
            )
        )
    events.append(
        CustomToolCallInputDone(item_id=item["id"], output_index=output_index, input=item["input"])
    )
    return events
