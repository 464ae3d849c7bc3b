"""POST /tokenize and /detokenize on a scripted pool: vLLM's shapes in,
the neuron's calls made as the request asks, errors in OpenAI's envelope,
the seconds they waited in the admission queue in the usage ledger."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi.testclient import TestClient

from axon.v1 import neuron_pb2 as pb
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from cortex.routing.policy import RouteHints
from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import UsageRow
from tests.unit.cortex.api.fakes import ScriptedPool, client


def test_a_prompt_is_tokenized_with_special_tokens_by_default() -> None:
    http, pool = client([])
    answer = http.post("/tokenize", json={"model": "m", "prompt": "abc"})
    assert answer.status_code == 200
    assert answer.json() == {
        "count": 3,
        "max_model_len": 100,
        "tokens": [0, 1, 2],
        "token_strs": None,
    }
    [sent] = pool.tokenized
    assert (sent.model, sent.prompt, sent.add_special_tokens) == ("m", "abc", True)
    assert sent.request_id.startswith("tokenize-")


def test_messages_go_to_the_neuron_with_the_template_options() -> None:
    http, pool = client([])
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
        "return_token_strs": True,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    answer = http.post("/tokenize", json=body)
    assert answer.status_code == 200 and answer.json()["count"] == 2
    assert answer.json()["token_strs"] == []
    [sent] = pool.tokenized
    assert not sent.HasField("prompt")
    assert [(m.role, m.content) for m in sent.messages] == [("system", "be brief"), ("user", "hi")]
    assert [t.name for t in sent.tools] == ["f"]
    assert (sent.add_special_tokens, sent.add_generation_prompt) == (False, False)
    assert sent.continue_final_message and sent.return_token_strs


def test_tokens_are_detokenized() -> None:
    http, pool = client([])
    answer = http.post("/detokenize", json={"model": "m", "tokens": [0, 1, 25]})
    assert (answer.status_code, answer.json()) == (200, {"prompt": "abz"})
    assert list(pool.detokenized[0].tokens) == [0, 1, 25]


def test_malformed_requests_get_openais_error_envelope() -> None:
    http, pool = client([])
    for body in (
        {"model": "m"},
        {"model": "m", "prompt": "a", "messages": [{"role": "user", "content": "b"}]},
        {
            "model": "m",
            "messages": [{"role": "user", "content": "b"}],
            "continue_final_message": True,
        },
    ):
        answer = http.post("/tokenize", json=body)
        assert answer.status_code == 400, body
        assert answer.json()["error"]["type"] == "invalid_request_error"
    negative = http.post("/detokenize", json={"model": "m", "tokens": [-1]})
    assert negative.status_code == 400
    assert pool.tokenized == [] and pool.detokenized == []


class QueuedPool(ScriptedPool):
    """Admission tells each call it waited 0.25 s in the queue, as the pool
    does through the request's hints."""

    async def tokenize(
        self, request: pb.TokenizeRequest, hints: RouteHints | None = None
    ) -> pb.TokenizeResponse:
        assert hints is not None and hints.waited is not None
        hints.waited.waited(0.25)
        return await super().tokenize(request, hints)

    async def detokenize(
        self, request: pb.DetokenizeRequest, hints: RouteHints | None = None
    ) -> pb.DetokenizeResponse:
        assert hints is not None and hints.waited is not None
        hints.waited.waited(0.5)
        return await super().detokenize(request, hints)


def test_the_ledger_counts_the_seconds_tokenize_and_detokenize_queued(tmp_path: Path) -> None:
    settings = CortexSettings(store=StoreSettings(state_dir=tmp_path))
    with TestClient(create_app(settings, pool=QueuedPool([]))) as http:
        assert http.post("/tokenize", json={"model": "m", "prompt": "abc"}).status_code == 200
        assert http.post("/detokenize", json={"model": "m", "tokens": [1]}).status_code == 200
    # Shut down: the ledger has flushed its last counts.

    async def rows() -> list[UsageRow]:
        store = SqliteTenantStore(tmp_path / "responses.sqlite3")
        try:
            return await store.usage(0, 2**40)
        finally:
            await store.close()

    found = asyncio.run(rows())  # one row, or two across an hour's turn
    assert {(key.tenant, key.model) for key, _ in found} == {("", "m")}
    assert sum(counts.requests for _, counts in found) == 2
    assert sum(counts.queue_s for _, counts in found) == 0.75
