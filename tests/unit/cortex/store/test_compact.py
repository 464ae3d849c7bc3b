"""Compacted events expand back to exactly the events a run made (sequence
numbers included), and take a bounded multiple of the final response."""

from __future__ import annotations

import json
from typing import Any

from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.builder import ResponseBuilder
from cortex.store import compact
from cortex.store.base import StoredResponse

Json = dict[str, Any]


def _answer(tokens: int, *, call: bool = False, logprobs: bool = False) -> tuple[list[Json], Json]:
    """The events and final object of a streamed answer of `tokens` text
    deltas (after some reasoning, and a tool call if asked)."""
    builder = ResponseBuilder("resp_1", 1, {"model": "m", "tools": [], "instructions": "be brief"})
    events = builder.start()
    events += builder.feed(pb.GenerateResponse(choices=[pb.ChoiceDelta(reasoning="Hmm, ")]))
    events += builder.feed(pb.GenerateResponse(choices=[pb.ChoiceDelta(reasoning="ok.")]))
    for i in range(tokens):
        entries = [pb.TokenLogprob(token=f" w{i}", logprob=-0.5)] if logprobs else []
        delta = pb.ChoiceDelta(text=f" w{i}", logprobs=entries)
        events += builder.feed(pb.GenerateResponse(choices=[delta]))
    if call:
        piece = pb.ToolCallDelta(index=0, id="call_1", name="f", arguments='{"a": ')
        events += builder.feed(pb.GenerateResponse(choices=[pb.ChoiceDelta(tool_calls=[piece])]))
        rest = pb.ToolCallDelta(index=0, arguments="1}")
        events += builder.feed(pb.GenerateResponse(choices=[pb.ChoiceDelta(tool_calls=[rest])]))
    end = pb.ChoiceDelta(finish_reason=pb.FINISH_REASON_STOP)
    events += builder.feed(
        pb.GenerateResponse(choices=[end], usage=pb.Usage(prompt_tokens=3, completion_tokens=9))
    )
    events += builder.finish()
    dumped = []
    for n, event in enumerate(events):
        event.sequence_number = n
        dumped.append(event.model_dump())
    return dumped, builder.snapshot()


def test_round_trip_is_exact() -> None:
    events, final = _answer(50, call=True)
    stored = compact.compact(events, final)
    assert isinstance(stored, dict)
    back = compact.expand(json.loads(json.dumps(stored)), final)
    assert back == events
    # The same keys in the same order: a replay sends the same bytes.
    assert [json.dumps(e) for e in back] == [json.dumps(e) for e in events]


def test_deltas_with_logprobs_round_trip() -> None:
    events, final = _answer(20, logprobs=True)
    assert compact.expand(compact.compact(events, final), final) == events


def test_a_thousand_token_answer_takes_at_most_twice_the_final_object() -> None:
    events, final = _answer(1000)
    whole = len(json.dumps(events))
    compacted = len(json.dumps(compact.compact(events, final)))
    size = len(json.dumps(final))
    assert whole > 10 * size  # what was stored before
    assert compacted <= 2 * size


def test_events_of_another_shape_are_kept_whole() -> None:
    final = {"id": "r", "output": []}
    odd = [{"type": "x", "sequence_number": 0, "v": {"$ref": []}}]
    assert compact.compact(odd, final) == odd
    untyped = [{"sequence_number": 0}]
    assert compact.compact(untyped, final) == untyped
    gap = [
        {"type": "response.output_text.delta", "sequence_number": 0, "item_id": "m", "delta": "a"},
        {"type": "response.output_text.delta", "sequence_number": 2, "item_id": "m", "delta": "b"},
    ]
    assert compact.expand(compact.compact(gap, final), final) == gap


def test_a_finished_record_is_stored_compacted_and_read_back_whole() -> None:
    events, final = _answer(100)
    record = StoredResponse("resp_1", 1, None, final, [], events=events)
    row = record.to_row()
    assert len(row[7]) < len(json.dumps(events)) / 3
    assert StoredResponse.from_row(row) == record


def test_a_running_record_is_stored_whole() -> None:
    events, final = _answer(5)
    running = {**final, "status": "in_progress"}
    record = StoredResponse("resp_1", 1, None, running, [], events=events)
    assert json.loads(record.to_row()[7]) == events
