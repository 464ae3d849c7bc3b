"""Integers on the wire that reach a protobuf field must fit it: a value
past the field's range is a 400 naming the parameter, not a 500 from the
protobuf encoder (found by the fuzz run, tests/fuzz)."""

from __future__ import annotations

from typing import Any

import pytest

from axon.v1 import neuron_pb2 as pb
from tests.unit.cortex.api.fakes import client

HUGE = 2**70  # past int64 and uint32 alike
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
DONE = pb.GenerateResponse(usage=pb.Usage(prompt_tokens=1, completion_tokens=1))


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, "seed": HUGE}, "seed"),
        ("/v1/chat/completions", {**CHAT, "seed": -HUGE}, "seed"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": 2**32}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 2**32}, "max_completion_tokens"),
        ("/v1/chat/completions", {**CHAT, "top_k": 2**31}, "top_k"),
        ("/v1/chat/completions", {**CHAT, "min_tokens": 2**32}, "min_tokens"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "seed": HUGE}, "seed"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 2**32}, "max_tokens"),
        (
            "/v1/responses",
            {"model": "m", "input": "hi", "max_output_tokens": 2**32},
            "max_output_tokens",
        ),
        ("/v1/embeddings", {"model": "e", "input": [1, 2**32]}, "input"),
        ("/v1/embeddings", {"model": "e", "input": [[1, 2**32]]}, "input"),
        ("/v1/embeddings", {"model": "e", "input": "hi", "dimensions": 2**32}, "dimensions"),
    ],
)
def test_an_integer_past_its_wire_field_is_a_400_naming_it(
    path: str, body: dict[str, Any], param: str
) -> None:
    test_client, _ = client([DONE])
    with test_client:
        response = test_client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].startswith(param)


@pytest.mark.parametrize("seed", [2**63 - 1, -(2**63)])
def test_the_extreme_seeds_that_fit_reach_the_engine(seed: int) -> None:
    test_client, pool = client([DONE])
    with test_client:
        body = {"model": "m", "prompt": "hi", "seed": seed}
        response = test_client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    assert pool.requests[0].sampling.seed == seed
