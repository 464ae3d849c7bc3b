"""The Responses routes on an app with a scripted pool and a real SQLite
store: create (streamed and not), retrieve, replay, and the 404s."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from axon.errors import ContextLengthExceededError
from axon.v1 import neuron_pb2 as pb
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from cortex.routing.factory import PolicyTable
from cortex.routing.policy import RouteHints
from harness import sse
from tests.unit.cortex.api.fakes import client
from tests.unit.cortex.routing.fakes import FakeNeuron
from tests.unit.cortex.routing.pools import fake_pool

HI = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="Hi")])
END = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=3, completion_tokens=1),
)


def _events(text: str) -> list[dict[str, Any]]:
    return sse.body_objects(text)


def test_streamed_create_then_replay_gives_the_same_events() -> None:
    c, _ = client([HI, END])
    with c:
        r = c.post("/v1/responses", json={"model": "m", "input": "Hello", "stream": True})
        events = _events(r.text)
        rid = events[0]["response"]["id"]
        assert r.headers["x-request-id"] == rid
        replayed = _events(c.get(f"/v1/responses/{rid}?stream=true").text)
        stored = c.get(f"/v1/responses/{rid}").json()
    assert events[-1]["type"] == "response.completed" and replayed == events
    assert stored["status"] == "completed" and stored["output"][0]["content"][0]["text"] == "Hi"


def test_non_streamed_create_continues_a_chain() -> None:
    c, pool = client([HI, END])
    with c:
        first = c.post("/v1/responses", json={"model": "m", "input": "Hello"}).json()
        body = {"model": "m", "input": "Again", "previous_response_id": first["id"]}
        second = c.post("/v1/responses", json=body).json()
    assert second["status"] == "completed" and second["previous_response_id"] == first["id"]
    assert [(m.role, m.content) for m in pool.requests[-1].messages] == [
        ("user", "Hello"),
        ("assistant", "Hi"),
        ("user", "Again"),
    ]


def test_error_before_the_first_token_keeps_its_status() -> None:
    c, _ = client([ContextLengthExceededError("too long")])
    with c:
        r = c.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_unknown_previous_response_is_404_naming_the_field() -> None:
    c, _ = client([HI, END])
    with c:
        r = c.post("/v1/responses", json={"model": "m", "input": "x", "previous_response_id": "n"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"


def test_a_bad_tool_is_a_400_naming_its_field() -> None:
    c, _ = client([HI, END])
    cases = [
        ({"type": "function", "name": "bad name!"}, "tools[0].name"),
        ({"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf",
                                                     "definition": "x"}}, "tools[0].format.syntax"),
        ({"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "a b"}]},
         "tools[0].tools[0].name"),
        ({"type": "telepathy"}, "tools[0]"),
    ]  # fmt: skip
    with c:
        for tool, param in cases:
            r = c.post("/v1/responses", json={"model": "m", "input": "x", "tools": [tool]})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_a_forced_hosted_tool_is_a_400_naming_it() -> None:
    c, _ = client([HI, END])
    body = {"model": "m", "input": "x", "tools": [{"type": "web_search"}],
            "tool_choice": {"type": "web_search_preview"}}  # fmt: skip
    with c:
        r = c.post("/v1/responses", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    assert "web_search_preview" in r.json()["error"]["message"]


def test_the_stored_copy_equals_the_created_object() -> None:
    c, _ = client([HI, END])
    body = {"model": "m", "input": "Hello", "prompt_cache_key": "k", "client_metadata": {"a": 1}}
    with c:
        created = c.post("/v1/responses", json=body).json()
        stored = c.get(f"/v1/responses/{created['id']}").json()
        streamed = _events(c.post("/v1/responses", json={**body, "stream": True}).text)
        completed = streamed[-1]["response"]
        stored_streamed = c.get(f"/v1/responses/{completed['id']}").json()
    assert stored == created and created["completed_at"] is not None
    assert created["client_metadata"] == {"a": 1} and created["prompt_cache_key"] == "k"
    assert stored_streamed == completed


def test_the_routing_hints_name_the_chain_and_the_cache_key() -> None:
    c, pool = client([HI, END])
    with c:
        first = c.post("/v1/responses", json={"model": "m", "input": "Hello"}).json()
        body = {
            "model": "m",
            "input": "Again",
            "previous_response_id": first["id"],
            "prompt_cache_key": "k",
        }
        c.post("/v1/responses", json=body)
    assert pool.hints == [
        RouteHints(),
        RouteHints(previous_response_id=first["id"], prompt_cache_key="k"),
    ]
    # The id a policy remembers a chain by (the request id) is the response's.
    assert pool.requests[0].request_id == first["id"]


def test_a_chain_returns_to_the_neuron_that_served_it() -> None:
    neurons = [FakeNeuron(f"route-{i}:1") for i in range(4)]
    pool = fake_pool(neurons, policy=PolicyTable("prefix_affinity"))
    settings = CortexSettings(
        store=StoreSettings(state_dir=Path(tempfile.mkdtemp(prefix="neuraxis-test-")))
    )
    with TestClient(create_app(settings, pool=pool)) as c:
        previous = c.post("/v1/responses", json={"model": "m", "input": "first"}).json()["id"]
        (served,) = [n for n in neurons if n.generate_requests]
        for i in range(5):
            # Instructions that change the prompt's first block: the ring
            # alone would scatter these turns; the chain keeps them home.
            body = {
                "model": "m",
                "input": f"turn {i}",
                "instructions": f"persona {i} " * (i + 1),
                "previous_response_id": previous,
            }
            previous = c.post("/v1/responses", json=body).json()["id"]
    assert len(served.generate_requests) == 6
