"""POST /v1/completions with a list of prompts: each prompt is a generation
of its own, and the answer's usage is theirs added up, streamed or not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from axon.v1 import neuron_pb2 as pb
from tests.unit.cortex.api.fakes import Script, client

SCRIPT: Script = [
    pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="Hi")]),
    pb.GenerateResponse(
        choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_STOP)],
        usage=pb.Usage(prompt_tokens=3, completion_tokens=2, cached_prompt_tokens=1),
    ),
]


def _usage(stream: bool) -> Any:
    body: dict[str, Any] = {"model": "m", "prompt": ["a", "b", "c"]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    test_client, _ = client(SCRIPT)
    with test_client:
        response = test_client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    if not stream:
        return response.json()["usage"]
    frames = [line[len("data: ") :] for line in response.text.splitlines()]
    return json.loads([f for f in frames if f.startswith("{")][-1])["usage"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_usage_of_a_prompt_list_is_the_prompts_added_up(stream: bool) -> None:
    assert _usage(stream) == {
        "prompt_tokens": 9,
        "completion_tokens": 6,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 3},
    }
