"""FastAPI's own validation errors in the OpenAI envelope: the param is the
parameter's name as the client wrote it, wherever it was (body, query or
path), never prefixed with where FastAPI found it."""

from __future__ import annotations

import json
import logging

import pytest

from axon.errors import InternalError
from axon.v1 import neuron_pb2 as pb
from tests.unit.cortex.api.fakes import client


@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/v1/responses/resp_1/input_items?limit=x", "limit"),
        ("/v1/responses/resp_1/input_items?order=sideways", "order"),
        ("/v1/responses/resp_1?starting_after=-5", "starting_after"),
        ("/v1/responses/resp_1?stream=maybe", "stream"),
    ],
)
def test_a_bad_query_parameter_is_a_400_naming_it(url: str, param: str) -> None:
    test_client, _ = client([])
    with test_client:
        response = test_client.get(url)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_a_bad_body_field_is_still_named_without_a_prefix() -> None:
    test_client, _ = client([])
    with test_client:
        response = test_client.post("/v1/completions", json={"model": "m", "prompt": 5})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "prompt"


def test_an_internal_error_answers_a_generic_message_with_the_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    detail = "engine at 10.1.2.3:50051 raised KeyError('/srv/model/config.json')"
    test_client, _ = client([InternalError(detail)])
    with caplog.at_level(logging.ERROR, logger="neuraxis.cortex"), test_client:
        response = test_client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    request_id = response.headers["x-request-id"]
    assert request_id.startswith("chatcmpl-") and request_id in error["message"]
    assert "10.1.2.3" not in response.text and "/srv" not in response.text
    # The details are in the log, under the id the client was given.
    (record,) = [r for r in caplog.records if detail in r.getMessage()]
    assert getattr(record, "request_id", None) == request_id


def test_a_purposeful_internal_error_keeps_its_message() -> None:
    class SaidError(InternalError):
        """A subclass says what happened on purpose (a deleted response, say)."""

    test_client, _ = client([SaidError("This response was deleted while it was running.")])
    with test_client:
        response = test_client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "This response was deleted while it was running."


def test_an_internal_error_mid_stream_ends_it_with_the_request_id() -> None:
    detail = "neuron 10.1.2.3:50051 lost its engine"
    first = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="a")])
    test_client, _ = client([first, InternalError(detail)])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with test_client, test_client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert error["code"] == "internal_error" and "Quote request id chatcmpl-" in error["message"]
    assert "10.1.2.3" not in "".join(lines)
