"""The Responses builder on scripted neuron streams: event order, items,
statuses. (The real-process tests check the same against the real model;
these cover what the small model never produces, like reasoning.)"""

from __future__ import annotations

import json

from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.builder import ResponseBuilder
from cortex.api.responses.events import (
    OutputItem,
    OutputTextDelta,
    OutputTextDone,
    ResponseLifecycle,
    parse_event,
)


def _msg(**delta: object) -> pb.GenerateResponse:
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, **delta)])  # type: ignore[arg-type]


def _end(reason: int = pb.FINISH_REASON_STOP) -> pb.GenerateResponse:
    return pb.GenerateResponse(
        choices=[pb.ChoiceDelta(index=0, finish_reason=reason)],  # type: ignore[arg-type]
        usage=pb.Usage(prompt_tokens=5, completion_tokens=3, cached_prompt_tokens=2),
    )


def _run(*messages: pb.GenerateResponse) -> tuple[ResponseBuilder, list[str]]:
    builder = ResponseBuilder("resp_1", 1, {"model": "m"})
    kinds: list[str] = [e.type for e in builder.start()]
    for m in messages:
        kinds += [e.type for e in builder.feed(m)]
    kinds += [e.type for e in builder.finish()]
    return builder, kinds


# A message item with one text delta, opened and closed.
_ONE_DELTA_MESSAGE = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def test_reasoning_then_text() -> None:
    builder, kinds = _run(_msg(reasoning="Hmm."), _msg(text="Paris"), _end())
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        *_ONE_DELTA_MESSAGE,
        "response.completed",
    ]
    reasoning, message = builder.output
    assert reasoning["type"] == "reasoning" and reasoning["content"][0]["text"] == "Hmm."
    assert message["content"][0]["text"] == "Paris" and message["status"] == "completed"
    assert builder.usage is not None and builder.usage["input_tokens_details"]["cached_tokens"] == 2


def test_length_makes_it_incomplete() -> None:
    builder, kinds = _run(_msg(text="Once"), _end(pb.FINISH_REASON_LENGTH))
    assert kinds[-1] == "response.incomplete"
    assert builder.snapshot()["incomplete_details"] == {"reason": "max_output_tokens"}


def test_function_calls_have_no_content_parts() -> None:
    call = pb.ToolCallDelta(index=0, id="call_1", name="f", arguments='{"a":')
    more = pb.ToolCallDelta(index=0, arguments=" 1}")
    builder, kinds = _run(_msg(tool_calls=[call]), _msg(tool_calls=[more]), _end())
    assert "response.content_part.added" not in kinds
    assert kinds.count("response.function_call_arguments.delta") == 2
    (item,) = builder.output
    assert item["arguments"] == '{"a": 1}' and item["call_id"] == "call_1"


def test_failure_closes_items_and_ends_failed() -> None:
    builder = ResponseBuilder("resp_1", 1, {})
    builder.feed(_msg(text="Par"))
    events = builder.fail("server_error", "neuron lost")
    last = events[-1]
    assert isinstance(last, ResponseLifecycle) and last.type == "response.failed"
    snapshot = last.response
    assert snapshot["status"] == "failed"
    assert snapshot["error"] == {"code": "server_error", "message": "neuron lost"}
    assert snapshot["output"][0]["status"] == "incomplete"


def test_events_are_typed_and_serialise_in_wire_order() -> None:
    builder = ResponseBuilder("resp_1", 1, {})
    (added, part, delta) = builder.feed(_msg(text="Hi"))
    assert isinstance(delta, OutputTextDelta) and delta.delta == "Hi"
    assert list(json.loads(delta.model_dump_json())) == [
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "content_index",
        "delta",
        "logprobs",
    ]
    assert (added.type, part.type) == ("response.output_item.added", "response.content_part.added")
    assert parse_event(delta.model_dump()) == delta


def test_resume_reopens_what_was_open_and_fails_like_a_running_one() -> None:
    running = ResponseBuilder("resp_1", 1, {"model": "m"})
    events = running.start()
    call = pb.ToolCallDelta(index=0, id="call_1", name="f", arguments='{"a"')
    events += running.feed(_msg(reasoning="Hmm."))
    events += running.feed(_msg(text="Let me call f."))
    events += running.feed(_msg(tool_calls=[call]))
    stored = [e.model_dump() for e in events]

    resumed = ResponseBuilder.resume(running.snapshot(), stored)
    ending = resumed.fail("server_error", "restarted")
    kinds = [e.type for e in ending]
    assert kinds == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.failed",
    ]
    reasoning, message, function_call = resumed.output
    assert reasoning["content"][0]["text"] == "Hmm."
    assert message["status"] == "completed"  # closed by the call, before the crash
    assert function_call["status"] == "incomplete" and function_call["arguments"] == '{"a"'
    assert resumed.snapshot()["model"] == "m" and resumed.snapshot()["status"] == "failed"


def test_text_then_a_streamed_call_each_in_its_own_item() -> None:
    named = pb.ToolCallDelta(index=0, id="call_1", name="f")
    builder, kinds = _run(
        _msg(text="Let me look. "),
        _msg(tool_calls=[named]),
        _msg(tool_calls=[pb.ToolCallDelta(index=0, arguments='{"a":')]),
        _msg(tool_calls=[pb.ToolCallDelta(index=0, arguments=" 1}")]),
        _end(pb.FINISH_REASON_TOOL_CALLS),
    )
    # The call's item opens as soon as its name is known; the text before
    # it is closed first.
    assert kinds[2:] == [
        *_ONE_DELTA_MESSAGE,
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    message, call = builder.output
    assert message["content"][0]["text"] == "Let me look. "
    assert (call["name"], call["arguments"], call["status"]) == ("f", '{"a": 1}', "completed")


def test_a_second_call_closes_the_first_as_it_starts() -> None:
    builder = ResponseBuilder("resp_1", 1, {})
    builder.start()
    builder.feed(_msg(tool_calls=[pb.ToolCallDelta(index=0, id="call_a", name="a")]))
    builder.feed(_msg(tool_calls=[pb.ToolCallDelta(index=0, arguments="{}")]))
    second = builder.feed(
        _msg(tool_calls=[pb.ToolCallDelta(index=1, id="call_b", name="b", arguments='{"k": 2}')])
    )
    assert [(e.type, getattr(e, "output_index", None)) for e in second] == [
        ("response.function_call_arguments.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.function_call_arguments.delta", 1),
    ]
    ends = builder.feed(_end(pb.FINISH_REASON_TOOL_CALLS)) + builder.finish()
    assert [(e.type, getattr(e, "output_index", None)) for e in ends] == [
        ("response.function_call_arguments.done", 1),
        ("response.output_item.done", 1),
        ("response.completed", None),
    ]
    assert [(i["call_id"], i["arguments"]) for i in builder.output] == [
        ("call_a", "{}"),
        ("call_b", '{"k": 2}'),
    ]


def _logprob(token: str, logprob: float) -> pb.TokenLogprob:
    top = [pb.TopLogprob(token=token, logprob=logprob, bytes=token.encode())]
    return pb.TokenLogprob(token=token, logprob=logprob, bytes=token.encode(), top=top)


def test_logprobs_go_on_each_text_delta_and_on_the_part() -> None:
    builder = ResponseBuilder("resp_1", 1, {})
    events = builder.start()
    events += builder.feed(_msg(text="Par", logprobs=[_logprob("Par", -0.5)]))
    # A token that made no text yet: its logprob goes with the next text.
    events += builder.feed(_msg(logprobs=[_logprob("\xe2", -1.0)]))
    events += builder.feed(_msg(text="is", logprobs=[_logprob("is", -0.25)]))
    events += builder.feed(_end())
    events += builder.finish()
    deltas = [e for e in events if isinstance(e, OutputTextDelta)]
    assert [[lp["token"] for lp in d.logprobs] for d in deltas] == [["Par"], ["\xe2", "is"]]
    first = deltas[0].logprobs[0]
    assert first == {
        "token": "Par",
        "logprob": -0.5,
        "bytes": list(b"Par"),
        "top_logprobs": [{"token": "Par", "logprob": -0.5, "bytes": list(b"Par")}],
    }
    (done,) = [e for e in events if isinstance(e, OutputTextDone)]
    (part,) = builder.output[0]["content"]
    assert [lp["logprob"] for lp in part["logprobs"]] == [-0.5, -1.0, -0.25]
    assert done.logprobs == part["logprobs"]


def test_without_logprobs_the_part_has_an_empty_list() -> None:
    builder, _ = _run(_msg(text="Paris"), _end())
    assert builder.output[0]["content"][0]["logprobs"] == []


def _call(index: int, name: str, arguments: str = "") -> pb.ToolCallDelta:
    return pb.ToolCallDelta(
        index=index, id=f"call_{index}" if name else "", name=name, arguments=arguments
    )


def test_calls_past_max_tool_calls_are_dropped_and_the_response_completes() -> None:
    builder = ResponseBuilder("resp_1", 1, {}, max_tool_calls=1)
    events = builder.start()
    events += builder.feed(_msg(tool_calls=[_call(0, "f", "{}"), _call(1, "g", '{"a"')]))
    events += builder.feed(_msg(tool_calls=[_call(1, "", ": 1}")]))
    events += builder.feed(_end(pb.FINISH_REASON_TOOL_CALLS))
    events += builder.finish()
    (call,) = builder.output
    assert call["name"] == "f" and call["status"] == "completed"
    ids = {
        e.item["id"] if isinstance(e, OutputItem) else getattr(e, "item_id", None) for e in events
    }
    assert ids == {None, call["id"]}  # no event of the dropped call
    assert builder.status == "completed"


def test_max_tool_calls_counts_the_calls_of_a_resumed_response() -> None:
    running = ResponseBuilder("resp_1", 1, {"max_tool_calls": 1}, max_tool_calls=1)
    stored = [e.model_dump() for e in running.feed(_msg(tool_calls=[_call(0, "f", "{}")]))]
    resumed = ResponseBuilder.resume(running.snapshot(), stored)
    assert resumed.feed(_msg(tool_calls=[_call(1, "g", "{}")])) == []


def test_completed_at_comes_from_the_clock_on_completion_only() -> None:
    done = ResponseBuilder("resp_1", 1, {}, clock=lambda: 42.9)
    done.feed(_msg(text="Hi"))
    done.finish()
    cut = ResponseBuilder("resp_2", 1, {}, clock=lambda: 42.9)
    cut.feed(_end(pb.FINISH_REASON_LENGTH))
    cut.finish()
    assert done.snapshot()["completed_at"] == 42
    assert cut.snapshot()["status"] == "incomplete" and cut.snapshot()["completed_at"] is None
