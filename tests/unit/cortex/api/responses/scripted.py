"""What the run tests share: scripted neuron streams, a run of a response
on a store, and the SSE frames it sends read back as events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from axon.v1 import neuron_pb2 as pb
from cortex.api.responses import run as runs
from cortex.api.responses.builder import ResponseBuilder
from cortex.recording import PrometheusRecorder
from cortex.store.base import ResponseStore


def text(content: str) -> pb.GenerateResponse:
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text=content)])


END = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=4, completion_tokens=2),
)


async def stream(
    *items: pb.GenerateResponse | BaseException,
) -> AsyncIterator[pb.GenerateResponse]:
    for item in items:
        if isinstance(item, BaseException):
            raise item
        yield item


def response_run(
    store: ResponseStore,
    rid: str = "resp_1",
    *,
    owner: str = "",
    background: bool = False,
    lease_s: float = 0.0,
    created: int = 1,
    clock: Callable[[], float] = time.time,
) -> runs.ResponseRun:
    """The run of a new stored response `rid` of model "m"."""
    builder = ResponseBuilder(rid, created, {"model": "m", "background": background})
    return runs.ResponseRun(
        store,
        builder,
        previous_response_id=None,
        input_items=[],
        stored=True,
        owner=owner,
        lease_s=lease_s,
        clock=clock,
        recorder=PrometheusRecorder(),
    )


def parse(frames: list[bytes]) -> list[dict[str, Any]]:
    """The events of the frames (a neuron message's events are one frame)."""
    events = []
    for frame in b"".join(frames).decode().split("\n\n")[:-1]:
        kind, data = frame.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events
