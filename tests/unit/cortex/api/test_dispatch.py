"""Dispatching an API request: request ids, the first message before the
answer, and how an embeddings request that loses its client is counted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY
from starlette.requests import Request
from starlette.types import Message, Scope

from cortex.api import dispatch
from cortex.api.caps import RequestCaps
from cortex.http.disconnect import ClientDisconnectedError
from cortex.routing.factory import PolicyTable
from cortex.routing.policy import RouteHints
from cortex.routing.pool import NeuronPool
from neuraxis.core.errors import UnavailableError
from neuraxis.core.v1 import neuron_pb2 as pb
from tests.unit.cortex.api.fakes import Script, ScriptedPool
from tests.unit.cortex.routing.fakes import FakeNeuron, Fleet


def _request(pool: ScriptedPool | NeuronPool, client_leaves: bool = True) -> Request:
    async def receive() -> Message:
        if not client_leaves:
            await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    app = SimpleNamespace(state=SimpleNamespace(pool=pool, caps=RequestCaps()))
    scope: Scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "app": app}
    return Request(scope, receive)


def _count(api: str, model: str, outcome: str) -> float:
    labels = {"api": api, "model": model, "outcome": outcome}
    return REGISTRY.get_sample_value("neuraxis_requests_total", labels) or 0.0


def test_request_ids_are_unique_and_prefixed() -> None:
    a, b = dispatch.new_request_id("chatcmpl"), dispatch.new_request_id("chatcmpl")
    assert a.startswith("chatcmpl-") and a != b


async def test_embeddings_client_that_leaves_is_counted_as_cancelled() -> None:
    pool = ScriptedPool([])  # its embed waits forever: the client leaves first
    before = {o: _count("embeddings", "e", o) for o in ("cancelled", "server_error")}
    with pytest.raises(ClientDisconnectedError):
        await dispatch.embed(_request(pool), pb.EmbedRequest(request_id="embd-1", model="e"))
    assert _count("embeddings", "e", "cancelled") == before["cancelled"] + 1
    assert _count("embeddings", "e", "server_error") == before["server_error"]


async def test_embeddings_failure_keeps_its_outcome() -> None:
    class Failing(ScriptedPool):
        async def embed(self, request: pb.EmbedRequest) -> pb.EmbedResponse:
            raise UnavailableError("busy")

    before = _count("embeddings", "e", "server_error")
    request = _request(Failing([]), client_leaves=False)
    with pytest.raises(UnavailableError):
        await dispatch.embed(request, pb.EmbedRequest(request_id="embd-2", model="e"))
    assert _count("embeddings", "e", "server_error") == before + 1


async def test_start_reads_each_stream_first_message() -> None:
    first = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="a")])
    script: Script = [first, pb.GenerateResponse(usage=pb.Usage())]
    pool = ScriptedPool(script)
    internals = [pb.GenerateRequest(request_id=f"c-{i}", model="m") for i in range(2)]
    started = await dispatch.start(_request(pool), "completions", "m", "c", internals)
    assert started.firsts == [first, first] and len(pool.requests) == 2
    for stream in started.streams:
        assert [m async for m in stream] == [script[1]]


async def test_an_error_before_the_first_message_is_raised() -> None:
    pool = ScriptedPool([UnavailableError("no neuron")])
    with pytest.raises(UnavailableError):
        await dispatch.start(_request(pool), "chat", "m", "c", [pb.GenerateRequest(model="m")])


# --- routing hints, at the seam with the real pool ----------------------------


def _affinity_pool(neurons: list[FakeNeuron]) -> NeuronPool:
    return NeuronPool(
        neurons,
        expected_models=["m"],
        poll_interval_s=0.05,
        request_timeout_s=5.0,
        max_retries=1,
        client_factory=Fleet(),
        policy=PolicyTable("prefix_affinity"),
    )


def _turn(request_id: str, content: str) -> pb.GenerateRequest:
    message = pb.ChatMessage(role="user", content=content)
    return pb.GenerateRequest(request_id=request_id, model="m", messages=[message])


async def _answer(request: Request, internal: pb.GenerateRequest, hints: RouteHints) -> None:
    started = await dispatch.start(
        request, "responses", "m", internal.request_id, [internal], hints
    )
    first, rest = started.only
    assert first.choices and [m async for m in rest]


async def test_the_hints_reach_the_policy_and_a_chain_returns_to_its_neuron() -> None:
    neurons = [FakeNeuron(f"hint-{i}:1") for i in range(4)]
    pool = _affinity_pool(neurons)
    await pool.refresh()
    request = _request(pool, client_leaves=False)
    await _answer(request, _turn("resp_a", "first turn"), RouteHints())
    (served,) = [n for n in neurons if n.generate_requests]
    # Prompts that share nothing with the first: only the hint (the id the
    # first was dispatched under) leads back to its neuron.
    for i in range(6):
        hints = RouteHints(previous_response_id="resp_a")
        await _answer(request, _turn(f"resp_{i}", f"unrelated {i} " * (i + 1)), hints)
    assert len(served.generate_requests) == 7
