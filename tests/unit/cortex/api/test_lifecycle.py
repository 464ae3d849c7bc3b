"""A dispatched request's life, recorded through the recorder it is given:
first output and gaps, usage, one outcome however it ends, and what its
rate-limit reservation hears back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from axon.errors import InvalidRequestError, UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.api.lifecycle import Tracker, outcome_of, tracked
from cortex.recording import Ended, NoRecorder, Observe


class Calls(NoRecorder):
    """A recorder that writes down what the lifecycle tells it."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    def started(self, api: str, model: str) -> None:
        self.seen.append(("started", api, model))

    def first_output(self, api: str, model: str, seconds: float) -> None:
        self.seen.append(("first_output", api, model))

    def inter_token(self, api: str, model: str) -> Observe:
        return lambda seconds: self.seen.append(("gap",))

    def finished(self, end: Ended) -> None:
        tokens = (end.prompt_tokens, end.output_tokens)
        self.seen.append(("finished", end.outcome, tokens, end.had_output))


TOKEN = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="a")])
END = pb.GenerateResponse(usage=pb.Usage(prompt_tokens=3, completion_tokens=2))


async def _stream(*items: pb.GenerateResponse | Exception) -> AsyncIterator[pb.GenerateResponse]:
    for item in items:
        if isinstance(item, Exception):
            raise item
        yield item


def test_outcomes_follow_the_error_table() -> None:
    assert outcome_of(InvalidRequestError("no")) == "client_error"
    assert outcome_of(UnavailableError("busy")) == "server_error"
    assert outcome_of(RuntimeError("bug")) == "server_error"


async def test_a_stream_read_to_its_usage_is_a_success_with_its_tokens() -> None:
    calls, ended = Calls(), list[tuple[int | None, int]]()
    tracker = Tracker(calls, "chat", "m", "chatcmpl-1")
    read = [m async for m in tracked(_stream(TOKEN, TOKEN, END), tracker, _into(ended))]
    assert read == [TOKEN, TOKEN, END]
    assert calls.seen == [
        ("started", "chat", "m"),
        ("first_output", "chat", "m"),
        ("gap",),
        ("finished", "success", (3, 2), True),
    ]
    assert ended == [(5, 2)]


async def test_a_failing_stream_finishes_once_with_its_outcome_and_gives_back_its_tokens() -> None:
    calls, ended = Calls(), list[tuple[int | None, int]]()
    tracker = Tracker(calls, "completions", "m", "cmpl-1")
    with pytest.raises(InvalidRequestError):
        async for _ in tracked(_stream(InvalidRequestError("no")), tracker, _into(ended)):
            pass
    assert calls.seen[1:] == [("finished", "client_error", (0, 0), False)]
    assert ended == [(0, 0)]


async def test_a_stream_dropped_before_its_usage_is_cancelled_with_what_it_generated() -> None:
    calls, ended = Calls(), list[tuple[int | None, int]]()
    stream = tracked(_stream(TOKEN, END), Tracker(calls, "chat", "m", "c-1"), _into(ended))
    assert await anext(stream) == TOKEN
    await stream.aclose()  # the client left
    assert calls.seen[-1] == ("finished", "cancelled", (0, 0), True)
    assert ended == [(None, 1)]  # no usage; one delta seen


def _into(ended: list[tuple[int | None, int]]) -> Callable[[int | None, int], None]:
    return lambda used, generated: ended.append((used, generated))


async def test_a_request_of_several_streams_ends_with_its_last() -> None:
    calls = Calls()
    tracker = Tracker(calls, "completions", "m", "cmpl-2", parts=2)
    for _ in range(2):
        assert [m async for m in tracked(_stream(TOKEN, END), tracker)] == [TOKEN, END]
    assert [c for c in calls.seen if c[0] == "finished"] == [("finished", "success", (6, 4), True)]


async def test_the_account_hears_the_end_once_with_the_cached_tokens() -> None:
    heard: list[tuple[str, int, int, int]] = []

    def account(end: Ended, cached: int) -> None:
        heard.append((end.outcome, end.prompt_tokens, end.output_tokens, cached))

    tracker = Tracker(NoRecorder(), "completions", "m", "cmpl-3", parts=2, account=account)
    cached_end = pb.GenerateResponse(
        usage=pb.Usage(prompt_tokens=5, completion_tokens=1, cached_prompt_tokens=4)
    )
    for stream in (_stream(TOKEN, END), _stream(TOKEN, cached_end)):
        async for _ in tracked(stream, tracker):
            pass
    assert heard == [("success", 8, 3, 4)]
    # A stream the client left: one end, cancelled, with no tokens.
    heard.clear()
    left = tracked(_stream(TOKEN, END), Tracker(NoRecorder(), "chat", "m", "c-2", account=account))
    await anext(left)
    await left.aclose()
    assert heard == [("cancelled", 0, 0, 0)]
