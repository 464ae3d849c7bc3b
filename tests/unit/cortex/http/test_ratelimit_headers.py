"""The auth dependency, the limiter and the x-ratelimit-* headers on the
app itself (a scripted pool, a real SQLite key store): what a client of a
limited key sees on each kind of response."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from axon.v1 import neuron_pb2 as pb
from cortex.auth.keys import KeyRequest
from tests.unit.cortex.api.fakes import auth_client

HI = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="Hi")])
END = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=3, completion_tokens=1),
)
CHAT: dict[str, Any] = {
    "model": "m",
    "max_tokens": 10,
    "messages": [{"role": "user", "content": "hi"}],
}


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_no_key_is_a_401_in_the_openai_envelope_without_rate_limit_headers() -> None:
    c, pool, _ = auth_client([HI, END])
    response = c.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert pool.requests == []
    assert not [h for h in response.headers if h.startswith("x-ratelimit")]


def test_health_routes_need_no_key() -> None:
    c, _, _ = auth_client([HI, END])
    assert c.get("/healthz").status_code == 200


def test_an_admitted_request_carries_its_admissions_headers() -> None:
    c, _, (secret,) = auth_client([HI, END], KeyRequest("acme", [], rpm=5, tpm=1000))
    response = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret))
    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-requests"] == "5"
    assert response.headers["x-ratelimit-remaining-requests"] == "4"
    assert response.headers["x-ratelimit-limit-tokens"] == "1000"
    remaining = int(response.headers["x-ratelimit-remaining-tokens"])
    assert 0 < remaining <= 1000 - 10  # at least the output cap was reserved


def test_over_rpm_is_a_429_with_retry_after_and_the_headers() -> None:
    c, pool, (secret,) = auth_client([HI, END], KeyRequest("acme", [], rpm=1))
    assert c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret)).status_code == 200
    over = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret))
    assert over.status_code == 429
    assert over.json()["error"]["code"] == "rate_limit_exceeded"
    assert over.json()["error"]["type"] == "requests"
    assert 1 <= int(over.headers["Retry-After"]) <= 60
    assert int(over.headers["retry-after-ms"]) <= 60_000
    assert over.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(pool.requests) == 1  # the refused one never reached a neuron


def test_a_request_bigger_than_the_token_budget_is_refused_before_routing() -> None:
    c, pool, (secret,) = auth_client([HI, END], KeyRequest("acme", [], tpm=5))
    over = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret))
    assert over.status_code == 429 and over.json()["error"]["type"] == "tokens"
    assert pool.requests == []


def test_a_key_limited_only_in_concurrency_gets_its_own_headers_and_no_invented_trio() -> None:
    c, _, (secret,) = auth_client([HI, END], KeyRequest("acme", [], max_concurrent=3))
    response = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret))
    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-concurrent-requests"] == "3"
    assert response.headers["x-ratelimit-remaining-concurrent-requests"] == "2"  # itself
    assert "x-ratelimit-limit-requests" not in response.headers
    assert "x-ratelimit-limit-tokens" not in response.headers
    models = c.get("/v1/models", headers=_bearer(secret))  # reserves nothing
    assert models.headers["x-ratelimit-remaining-concurrent-requests"] == "3"


def test_refusals_are_counted_by_tenant_and_limit() -> None:
    c, _, (secret,) = auth_client([HI, END], KeyRequest("refused-co", [], rpm=1, tpm=1000))

    def refused(reason: str) -> float:
        labels = {"tenant": "refused-co", "reason": reason}
        return REGISTRY.get_sample_value("neuraxis_rate_limited_total", labels) or 0.0

    before = refused("requests")
    assert c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret)).status_code == 200
    assert c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret)).status_code == 429
    assert refused("requests") == before + 1
    assert refused("tokens") == 0


def test_a_key_without_limits_gets_no_rate_limit_headers() -> None:
    c, _, (secret,) = auth_client([HI, END], KeyRequest("acme", []))
    response = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret))
    assert response.status_code == 200
    assert not [h for h in response.headers if h.startswith("x-ratelimit")]


def test_a_model_outside_the_key_is_404_and_hidden_from_the_model_list() -> None:
    c, pool, (secret,) = auth_client([HI, END], KeyRequest("acme", ["e"]))
    refused = c.post("/v1/chat/completions", json=CHAT, headers=_bearer(secret))
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"
    assert refused.json()["error"]["message"] == "The model 'm' does not exist."
    assert pool.requests == []
    listed = c.get("/v1/models", headers=_bearer(secret)).json()
    assert [m["id"] for m in listed["data"]] == ["e"]
    assert c.get("/v1/models/m", headers=_bearer(secret)).status_code == 404
    embed = c.post("/v1/embeddings", json={"model": "m", "input": "x"}, headers=_bearer(secret))
    assert embed.status_code == 404 and embed.json()["error"]["code"] == "model_not_found"
