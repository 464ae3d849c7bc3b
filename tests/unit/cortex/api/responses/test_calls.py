"""Call items in the Responses builder: a namespaced function's call carries
`namespace`, a custom tool's call is a custom_tool_call with `input`, with
its own input events; what the SDK's strict models accept."""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import ResponseCustomToolCall, ResponseFunctionToolCall

from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.builder import ResponseBuilder
from cortex.api.responses.events import ResponseEvent

CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "The CRM.",
    "tools": [{"type": "function", "name": "lookup"}, {"type": "custom", "name": "note"}],
}
PATCH = {"type": "custom", "name": "apply_patch"}


def _call(name: str, arguments: str, index: int = 0, first: bool = True) -> pb.GenerateResponse:
    call = pb.ToolCallDelta(index=index, arguments=arguments)
    if first:
        call.id, call.name = f"call_{index}", name
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, tool_calls=[call])])


END = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_TOOL_CALLS)],
    usage=pb.Usage(prompt_tokens=5, completion_tokens=3),
)


def _run(
    fields: dict[str, Any], *messages: pb.GenerateResponse
) -> tuple[ResponseBuilder, list[ResponseEvent]]:
    builder = ResponseBuilder("resp_1", 1, {"model": "m", **fields})
    events = builder.start()
    for m in messages:
        events += builder.feed(m)
    events += builder.finish()
    return builder, events


def test_a_namespaced_function_call_carries_its_namespace() -> None:
    builder, events = _run({"tools": [CRM]}, _call("crm.lookup", '{"id": 1}'), END)
    (item,) = builder.output
    call = ResponseFunctionToolCall.model_validate(item)
    assert (call.name, call.namespace, call.arguments) == ("lookup", "crm", '{"id": 1}')
    assert call.call_id == "call_0" and call.status == "completed"
    assert "response.function_call_arguments.done" in [e.type for e in events]


def test_a_custom_call_has_its_input_unwrapped_and_its_own_events() -> None:
    arguments = json.dumps({"input": "*** Begin Patch"})
    builder, events = _run(
        {"tools": [CRM, PATCH]},
        _call("apply_patch", arguments[:5]),
        _call("apply_patch", arguments[5:], first=False),
        _call("crm.note", json.dumps({"input": "hi"}), index=1),
        END,
    )
    patch, note = (ResponseCustomToolCall.model_validate(i) for i in builder.output)
    assert (patch.name, patch.input, patch.namespace) == ("apply_patch", "*** Begin Patch", None)
    assert (note.name, note.input, note.namespace) == ("note", "hi", "crm")
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    # The input is known whole only at the end: one delta, then done, per call.
    assert kinds.count("response.custom_tool_call_input.delta") == 2
    assert kinds.count("response.custom_tool_call_input.done") == 2
    done = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert [e.model_dump()["input"] for e in done] == ["*** Begin Patch", "hi"]


def test_a_forced_custom_call_streams_its_raw_input() -> None:
    builder, events = _run(
        {"tools": [PATCH], "tool_choice": {"type": "custom", "name": "apply_patch"}},
        _call("apply_patch", "*** Begin"),
        _call("apply_patch", " Patch", first=False),
        END,
    )
    deltas = [e.model_dump()["delta"] for e in events if e.type.endswith("input.delta")]
    assert deltas == ["*** Begin", " Patch"]
    assert builder.output[0]["input"] == "*** Begin Patch"


def test_a_resumed_response_names_its_calls_the_same_way() -> None:
    builder = ResponseBuilder("resp_1", 1, {"model": "m", "tools": [CRM]})
    events = builder.start() + builder.feed(_call("crm.lookup", "{}"))
    stored = [e.model_dump() for e in events]
    resumed = ResponseBuilder.resume(builder.snapshot(), stored)
    resumed.feed(_call("crm.lookup", "", index=1))
    resumed.fail("server_error", "stopped")
    first, second = resumed.output
    assert first["namespace"] == second["namespace"] == "crm"
    # The second call closed the first; the failure left the second open.
    assert (first["status"], second["status"]) == ("completed", "incomplete")
