"""Request caps through the HTTP edge, in-process: an app with small caps on
a scripted pool (the model's context: 100 tokens). Every cap is a 400 naming
the API's parameter before anything reaches the pool; within the caps the
request is served; background responses are capped per tenant; embeddings
at their defaults, against the 16 MiB body limit.

Each cap is a settings field, so its flag and env name come from the one
generator (tests/unit/neuraxis/test_cli.py); nothing here needs a
process, which tests/integration/test_caps.py started for the same checks."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from axon.v1 import neuron_pb2 as pb
from cortex.api.caps import RequestCaps
from cortex.api.gateway import gateway_of_app
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from cortex.routing.policy import RouteHints
from harness.polling import wait_until
from tests.unit.cortex.api.fakes import ScriptedPool
from tests.unit.cortex.api.fakes import client as default_client

MODEL = "m"
DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="ok", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=1, completion_tokens=1),
)


class HoldingPool(ScriptedPool):
    """A scripted pool whose generations wait while `holding` is set, as a
    long generation does (a running background response)."""

    def __init__(self) -> None:
        super().__init__([DONE])
        self.holding = False

    async def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        while self.holding:
            await asyncio.sleep(0.01)  # polls the flag the test thread clears
        async for item in super().generate(request, hints):
            yield item


class DefaultingPool(ScriptedPool):
    """A scripted pool whose model's neuron generates at most `default`
    tokens for a request without max_tokens (its Info's default_max_tokens)."""

    def __init__(self, default: int) -> None:
        super().__init__([DONE])
        self.default = default

    def served_models(self) -> dict[str, pb.ModelInfo]:
        models = super().served_models()
        models[MODEL].default_max_tokens = self.default
        return models


def _settings() -> CortexSettings:
    return CortexSettings(
        store=StoreSettings(state_dir=Path(tempfile.mkdtemp(prefix="neuraxis-test-"))),
        caps=RequestCaps(
            max_messages=3,
            max_tools=2,
            max_stop_sequences=2,
            max_schema_bytes=300,
            max_completion_prompts=3,
            max_prompts_times_n=4,
            max_background_per_tenant=1,
            max_output_entries=1000,
            max_request_schema_bytes=400,
            max_stop_bytes=8,
            max_echo_bytes=1000,
        ),
    )


@pytest.fixture(scope="module")
def app() -> Iterator[tuple[TestClient, HoldingPool]]:
    pool = HoldingPool()
    with TestClient(create_app(_settings(), pool=pool)) as client:
        yield client, pool


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _tool(name: str, size: int = 0) -> dict[str, Any]:
    properties = {f"p{i}": {"type": "string"} for i in range(size)}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


SCHEMA = {"type": "object", "properties": {f"field{i}": {"type": "string"} for i in range(20)}}

# (path, body, the param the 400 must name)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("chat/completions", {"messages": [_user("a")] * 4}, "messages"),
    (
        "chat/completions",
        {"messages": [_user("a")], "tools": [_tool(f"t{i}") for i in range(3)]},
        "tools",
    ),
    ("chat/completions", {"messages": [_user("a")], "stop": ["x", "y", "z"]}, "stop"),
    ("chat/completions", {"messages": [_user("a")], "tools": [_tool("big", 20)]}, "tools"),
    (
        "chat/completions",
        {
            "messages": [_user("a")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": SCHEMA},
            },
        },
        "response_format.json_schema.schema",
    ),
    ("chat/completions", {"messages": [_user("a")], "max_tokens": 5000}, "max_tokens"),
    (
        "chat/completions",
        {"messages": [_user("a")], "max_completion_tokens": 5000},
        "max_completion_tokens",
    ),
    # n × max_tokens × (1 + top_logprobs) (× prompts) over max_output_entries
    (
        "chat/completions",
        {"messages": [_user("a")], "n": 4, "max_tokens": 50, "logprobs": True, "top_logprobs": 5},
        "max_tokens",
    ),
    (
        "chat/completions",
        {
            "messages": [_user("a")],
            "max_completion_tokens": 90,
            "logprobs": True,
            "top_logprobs": 20,
        },
        "max_completion_tokens",
    ),
    ("chat/completions", {"messages": [_user("a")], "n": 11}, "max_tokens"),  # × the context
    ("completions", {"prompt": ["a", "b"], "n": 2, "max_tokens": 50, "logprobs": 5}, "max_tokens"),
    # per request: each tool's schema under 300 bytes, together over 400
    (
        "chat/completions",
        {"messages": [_user("a")], "tools": [_tool("t0", 8), _tool("t1", 8)]},
        "tools",
    ),
    ("chat/completions", {"messages": [_user("a")], "stop": ["a" * 9]}, "stop"),
    ("completions", {"prompt": ["a" * 300, "b" * 300], "echo": True, "n": 2}, "echo"),
    ("completions", {"prompt": ["a", "b", "c", "d"]}, "prompt"),
    ("completions", {"prompt": ["a", "b", "c"], "n": 2}, "n"),
    ("completions", {"prompt": "a", "max_tokens": 5000}, "max_tokens"),
    ("responses", {"input": [_user("a")] * 4}, "input"),
    ("responses", {"input": "a", "max_output_tokens": 5000}, "max_output_tokens"),
    (
        "responses",
        {"input": "a", "text": {"format": {"type": "json_schema", "name": "s", "schema": SCHEMA}}},
        "text.format.schema",
    ),
]


@pytest.mark.parametrize(("path", "body", "param"), CASES)
def test_each_cap_is_a_400_naming_its_param_before_any_work(
    app: tuple[TestClient, HoldingPool], path: str, body: dict[str, Any], param: str
) -> None:
    client, pool = app
    before = len(pool.requests)
    r = client.post(f"/v1/{path}", json={"model": MODEL, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert len(pool.requests) == before


def test_within_the_caps_requests_are_served(app: tuple[TestClient, HoldingPool]) -> None:
    client, pool = app
    before = len(pool.requests)
    body = {"model": MODEL, "messages": [_user("a")] * 3, "stop": ["x", "y"], "max_tokens": 2}
    body["tools"] = [_tool("t0"), _tool("t1")]
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    r = client.post(
        "/v1/completions", json={"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 2}
    )
    assert r.status_code == 200, r.text
    # One internal request per prompt, each asking for n = 2.
    assert [q.sampling.n for q in pool.requests[before:]] == [0, 2, 2]


@pytest.mark.parametrize(("default", "n", "status"), [(50, 11, 200), (95, 11, 400), (500, 9, 200)])
def test_a_missing_max_tokens_counts_what_the_neuron_generates_without_one(
    default: int, n: int, status: int
) -> None:
    """The neuron's default_max_tokens, at most the context (100 tokens),
    times n against max_output_entries (1000), where the context alone
    refused n = 11."""
    pool = DefaultingPool(default)
    with TestClient(create_app(_settings(), pool=pool)) as client:
        r = client.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [_user("a")], "n": n}
        )
    assert r.status_code == status, r.text
    if status == 400:
        assert r.json()["error"]["param"] == "max_tokens"
        assert not pool.requests


def test_background_responses_per_tenant_are_capped(app: tuple[TestClient, HoldingPool]) -> None:
    client, pool = app
    body = {"model": MODEL, "input": "a", "background": True, "max_output_tokens": 40}
    pool.holding = True
    try:
        first = client.post("/v1/responses", json=body)
        assert first.status_code == 200, first.text
        second = client.post("/v1/responses", json=body)
        assert second.status_code == 400, second.text
        assert second.json()["error"]["param"] == "background"
        cancelled = client.post(f"/v1/responses/{first.json()['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
    finally:
        pool.holding = False
    # Once the first has ended, another may start.
    r = client.post("/v1/responses", json={**body, "max_output_tokens": 2})
    assert r.status_code == 200, r.text


def test_a_burst_of_background_responses_never_passes_the_cap(
    app: tuple[TestClient, HoldingPool],
) -> None:
    """Eight at once, on the app's one event loop: each is checked and
    claimed before the others' routing and storing awaits."""
    client, pool = app
    runs = gateway_of_app(client.app).runs  # type: ignore[arg-type]
    assert wait_until(lambda: not runs.background, 10)  # earlier tests' runs have ended
    body = {"model": MODEL, "input": "a", "background": True, "max_output_tokens": 40}
    pool.holding = True
    try:
        with ThreadPoolExecutor(8) as threads:
            burst = list(threads.map(lambda _: client.post("/v1/responses", json=body), range(8)))
        accepted = [r.json()["id"] for r in burst if r.status_code == 200]
        assert sorted(r.status_code for r in burst) == [200] + [400] * 7
        for response_id in accepted:
            assert client.post(f"/v1/responses/{response_id}/cancel").status_code == 200
    finally:
        pool.holding = False
    assert wait_until(lambda: not runs.background and not runs.starting, 10)


def test_embedding_inputs_are_capped_at_their_defaults() -> None:
    client, pool = default_client([])
    pool.release.set()  # an input past the caps would be embedded: a 200
    with client:
        many = client.post("/v1/embeddings", json={"model": "e", "input": ["a"] * 2049})
        assert many.status_code == 400 and many.json()["error"]["param"] == "input", many.text
        # 9 MiB of text, under the 16 MiB body limit, over the 8 MiB input cap.
        large = ["x" * (3 * 1024 * 1024)] * 3
        big = client.post("/v1/embeddings", json={"model": "e", "input": large})
        assert big.status_code == 400, big.text
        error = big.json()["error"]
        assert error["param"] == "input" and "bytes" in error["message"], error
