"""Dispatching an API request: request ids, the first message before the
answer, and how an embeddings request that loses its client is counted."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY
from starlette.requests import Request
from starlette.types import Message

from axon.errors import ContextLengthExceededError, InvalidRequestError, UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.api import dispatch
from cortex.http.context import context_of
from cortex.http.disconnect import ClientDisconnectedError
from cortex.routing.factory import PolicyTable
from cortex.routing.policy import RouteHints
from cortex.routing.pool import NeuronPool
from cortex.schemas.surfaces import CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES, Surface
from tests.unit.cortex.api.fakes import Script, ScriptedPool, api_request, client, gateway
from tests.unit.cortex.routing.fakes import FakeNeuron
from tests.unit.cortex.routing.pools import fake_pool


def _request(
    pool: ScriptedPool | NeuronPool, surface: Surface = CHAT, client_leaves: bool = True
) -> Request:
    """A request to an app over `pool`, claimed by `surface`."""

    async def receive() -> Message:
        if not client_leaves:
            await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    request = api_request(gateway(pool), receive)
    dispatch.claim(request, surface)
    return request


def _count(api: str, model: str, outcome: str) -> float:
    labels = {"api": api, "model": model, "outcome": outcome}
    return REGISTRY.get_sample_value("neuraxis_requests_total", labels) or 0.0


def test_a_claim_gives_the_request_a_new_id_of_its_surface() -> None:
    request = api_request(gateway(ScriptedPool([])))
    a = dispatch.claim(request, CHAT)
    assert a.startswith("chatcmpl-") and context_of(request).request_id == a
    assert dispatch.claim(request, RESPONSES).startswith("resp_")
    assert context_of(request).surface is RESPONSES and context_of(request).request_id != a


async def test_a_request_no_surface_claimed_is_not_dispatched() -> None:
    with pytest.raises(RuntimeError):
        await dispatch.start(api_request(gateway(ScriptedPool([]))), [pb.GenerateRequest()])


async def test_embeddings_client_that_leaves_is_counted_as_cancelled() -> None:
    pool = ScriptedPool([])  # its embed waits forever: the client leaves first
    before = {o: _count("embeddings", "e", o) for o in ("cancelled", "server_error")}
    with pytest.raises(ClientDisconnectedError):
        request = _request(pool, EMBEDDINGS)
        await dispatch.embed(request, pb.EmbedRequest(request_id="embd-1", model="e"))
    assert _count("embeddings", "e", "cancelled") == before["cancelled"] + 1
    assert _count("embeddings", "e", "server_error") == before["server_error"]


async def test_embeddings_failure_keeps_its_outcome() -> None:
    class Failing(ScriptedPool):
        async def embed(
            self, request: pb.EmbedRequest, hints: RouteHints | None = None
        ) -> pb.EmbedResponse:
            raise UnavailableError("busy")

    before = _count("embeddings", "e", "server_error")
    request = _request(Failing([]), EMBEDDINGS, client_leaves=False)
    with pytest.raises(UnavailableError):
        await dispatch.embed(request, pb.EmbedRequest(request_id="embd-2", model="e"))
    assert _count("embeddings", "e", "server_error") == before + 1


async def test_start_reads_each_stream_first_message() -> None:
    first = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="a")])
    script: Script = [first, pb.GenerateResponse(usage=pb.Usage())]
    pool = ScriptedPool(script)
    internals = [pb.GenerateRequest(request_id=f"c-{i}", model="m") for i in range(2)]
    started = await dispatch.start(_request(pool, COMPLETIONS), internals)
    assert started.firsts == [first, first] and len(pool.requests) == 2
    for stream in started.streams:
        assert [m async for m in stream] == [script[1]]


async def test_an_error_before_the_first_message_is_raised() -> None:
    pool = ScriptedPool([UnavailableError("no neuron")])
    with pytest.raises(UnavailableError):
        await dispatch.start(_request(pool), [pb.GenerateRequest(model="m")])


# --- routing hints, at the seam with the real pool ----------------------------


def _affinity_pool(neurons: list[FakeNeuron]) -> NeuronPool:
    return fake_pool(neurons, policy=PolicyTable("prefix_affinity"))


def _turn(request_id: str, content: str) -> pb.GenerateRequest:
    message = pb.ChatMessage(role="user", content=content)
    return pb.GenerateRequest(request_id=request_id, model="m", messages=[message])


async def _answer(request: Request, internal: pb.GenerateRequest, hints: RouteHints) -> None:
    started = await dispatch.start(request, [internal], hints)
    first, rest = started.only
    assert first.choices and [m async for m in rest]


async def test_the_hints_reach_the_policy_and_a_chain_returns_to_its_neuron() -> None:
    neurons = [FakeNeuron(f"hint-{i}:1") for i in range(4)]
    pool = _affinity_pool(neurons)
    await pool.refresh()
    request = _request(pool, RESPONSES, client_leaves=False)
    await _answer(request, _turn("resp_a", "first turn"), RouteHints())
    (served,) = [n for n in neurons if n.generate_requests]
    # Prompts that share nothing with the first: only the hint (the id the
    # first was dispatched under) leads back to its neuron.
    for i in range(6):
        hints = RouteHints(previous_response_id="resp_a")
        await _answer(request, _turn(f"resp_{i}", f"unrelated {i} " * (i + 1)), hints)
    assert len(served.generate_requests) == 7


_HI = [{"role": "user", "content": "hi"}]
_CHAT_MAX_COMPLETION = {"model": "m", "messages": _HI, "max_completion_tokens": 5}
_CHAT_MAX_TOKENS = {"model": "m", "messages": _HI, "max_tokens": 5}
_RESPONSES = {"model": "m", "input": "hi", "max_output_tokens": 5}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/responses",
            {"model": "m", "input": "hi", "max_output_tokens": 5},
            "max_output_tokens",
        ),
        ("/v1/chat/completions", _CHAT_MAX_COMPLETION, "max_completion_tokens"),
        ("/v1/chat/completions", _CHAT_MAX_TOKENS, "max_tokens"),
    ],
)
def test_a_neurons_refusal_names_the_field_as_the_clients_api_spells_it(
    path: str, body: dict[str, object], param: str
) -> None:
    # The neuron sees the internal request and names fields in chat terms.
    refusal = InvalidRequestError(
        "Invalid 'max_tokens': the value is outside the range.", param="max_tokens"
    )
    test_client, _ = client([refusal])
    with test_client:
        answer = test_client.post(path, json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param
    assert error["message"] == f"Invalid '{param}': the value is outside the range."


def test_a_context_refusal_on_responses_names_its_input() -> None:
    refusal = ContextLengthExceededError("Invalid 'messages': no room for an answer.")
    test_client, _ = client([refusal])
    with test_client:
        answer = test_client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("input", "context_length_exceeded")
    assert error["message"] == "Invalid 'input': no room for an answer."
