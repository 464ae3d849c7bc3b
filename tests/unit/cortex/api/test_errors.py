"""FastAPI's own validation errors in the OpenAI envelope: the param is the
parameter's name as the client wrote it, wherever it was (body, query or
path), never prefixed with where FastAPI found it."""

from __future__ import annotations

import pytest

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
