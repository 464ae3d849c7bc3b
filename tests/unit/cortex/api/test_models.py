"""GET /v1/models and /v1/models/{id}: which endpoints serve each model."""

from __future__ import annotations

from tests.unit.cortex.api.fakes import client

GENERATE = ["/v1/chat/completions", "/v1/completions", "/v1/responses"]


def test_a_chat_model_lists_the_responses_endpoint() -> None:
    c, _ = client([])
    with c:
        card = c.get("/v1/models/m").json()
        listed = {m["id"]: m["endpoints"] for m in c.get("/v1/models").json()["data"]}
    assert card["endpoints"] == GENERATE
    assert listed == {"m": GENERATE, "e": ["/v1/embeddings"]}


def test_unknown_model_is_model_not_found() -> None:
    c, _ = client([])
    with c:
        r = c.get("/v1/models/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
