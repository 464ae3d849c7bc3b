"""The limiter on a real key store (SQLite, its counters shared or local)
and a hand-moved clock:
reservations under concurrency, settlement with the real usage, release on
failure, the 429s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

import pytest

from axon.errors import InternalError, RateLimitError, TokenRateLimitError
from axon.v1 import neuron_pb2 as pb
from cortex.api.lifecycle import Tracker, tracked
from cortex.auth.limiter import (
    TEMPLATE_TOKENS,
    Admission,
    Limiter,
    estimate_embed,
    estimate_generate,
    prompt_bound,
)
from cortex.auth.limits import Limits
from cortex.auth.local_usage import counters_for
from cortex.auth.principal import Principal
from cortex.recording import NoRecorder
from cortex.store.keys import KeyStore, Usage
from cortex.store.sqlite_keys import SqliteKeyStore
from harness.clock import ManualClock as Clock

T0 = 1_800_000_000.0


@pytest.fixture(params=["shared", "local"])
def store(request: pytest.FixtureRequest, store: SqliteKeyStore) -> KeyStore:
    """The SQLite store's counters (conftest.py's store), or this process's
    in front of it: the limiter behaves the same on both."""
    return counters_for(store, local=request.param == "local")


def metered(
    stream: AsyncIterator[pb.GenerateResponse], admission: Admission
) -> AsyncIterator[pb.GenerateResponse]:
    """A neuron stream reporting into the admission, as dispatch wires it."""
    tracker = Tracker(NoRecorder(), "chat", "m", "chatcmpl-1")
    return tracked(stream, tracker, admission.stream_ended)


def _principal(**limits: int) -> Principal:
    return Principal(tenant="acme", key_id="key_a", limits=Limits(**limits))


async def _answered() -> AsyncIterator[pb.GenerateResponse]:
    """A neuron's stream that ends with its usage: 42 tokens."""
    yield pb.GenerateResponse()
    yield pb.GenerateResponse(usage=pb.Usage(prompt_tokens=30, completion_tokens=12))


async def _read_all(stream: AsyncIterator[pb.GenerateResponse]) -> None:
    async for _ in stream:
        pass


async def _settled(limiter: Limiter, store: KeyStore) -> Usage:
    """The key's usage once the limiter has written what it settled."""
    await limiter.drain()
    return await store.usage("key_a", T0 + 2)


def test_the_estimate_is_the_prompt_bound_plus_the_output_cap() -> None:
    request = pb.GenerateRequest(prompt="x" * 400, sampling=pb.SamplingParams(max_tokens=50))
    prompt = prompt_bound(request, 0)
    assert prompt == request.ByteSize() + TEMPLATE_TOKENS
    assert estimate_generate(request, max_context=2048, unset=2048) == prompt + 50
    request.sampling.n = 3
    assert estimate_generate(request, 2048, unset=2048) == prompt_bound(request, 0) + 150
    request.sampling.ClearField("max_tokens")
    assert estimate_generate(request, 2048, unset=2048) == prompt_bound(request, 0) + 3 * 2048
    # Without max_tokens, what the model generates without one (its default).
    assert estimate_generate(request, 2048, unset=512) == prompt_bound(request, 0) + 3 * 512
    # A prompt cannot pass the context (the neuron refuses or truncates it).
    assert estimate_generate(request, max_context=300, unset=300) == 300 + 3 * 300


def test_the_prompt_bound_is_not_below_a_token_a_byte_and_the_template() -> None:
    """The worst tokenizer (a token per byte of text) with a template that
    writes 4 special tokens around each message (ChatML's) and a JSON
    wrapper around each tool."""
    messages = [pb.ChatMessage(role="user", content="é" * 50), pb.ChatMessage(role="assistant")]
    tool = pb.Tool(name="f", description="d", parameters_json="{}")
    request = pb.GenerateRequest(messages=messages, tools=[tool])
    rendered = sum(4 + len(m.role) + len(m.content.encode()) for m in messages)
    tool_json = (
        '{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}'
    )
    assert prompt_bound(request, 0) >= rendered + len(tool_json) + TEMPLATE_TOKENS


def test_embedding_token_ids_are_counted_exactly() -> None:
    request = pb.EmbedRequest(
        inputs=[pb.EmbedInput(tokens=pb.TokenIds(ids=[1, 2, 3])), pb.EmbedInput(text="héllo")]
    )
    assert estimate_embed(request) == 3 + len("héllo".encode()) + 2


async def test_fifty_concurrent_requests_never_pass_the_token_budget(store: KeyStore) -> None:
    limiter = Limiter(store, Clock(T0 + 1), lease_s=600)
    principal = _principal(tpm=1000)

    async def one() -> int:
        try:
            await limiter.admit(principal, 70)
        except TokenRateLimitError:
            return 0
        return 70

    admitted = await asyncio.gather(*(one() for _ in range(50)))
    assert sum(admitted) == 14 * 70
    assert (await store.usage("key_a", T0 + 1)).tokens == 14 * 70


async def test_settlement_replaces_the_reservation_with_the_real_usage(store: KeyStore) -> None:
    limiter = Limiter(store, Clock(T0 + 1), lease_s=600)
    admission = await limiter.admit(_principal(tpm=1000), 600)
    assert admission.headers["x-ratelimit-remaining-tokens"] == "400"
    await _read_all(metered(_answered(), admission))
    usage = await _settled(limiter, store)
    assert (usage.tokens, usage.requests, usage.in_flight) == (42, 1, 0)


async def test_a_failed_request_gives_its_tokens_back(store: KeyStore) -> None:
    limiter = Limiter(store, Clock(T0 + 1), lease_s=600)
    admission = await limiter.admit(_principal(tpm=1000), 600)

    async def neuron() -> AsyncIterator[pb.GenerateResponse]:
        yield pb.GenerateResponse()
        raise InternalError("engine died")

    with pytest.raises(InternalError):
        await _read_all(metered(neuron(), admission))
    usage = await _settled(limiter, store)
    assert (usage.tokens, usage.requests, usage.in_flight) == (0, 1, 0)


async def test_release_before_any_stream_ran_frees_everything(store: KeyStore) -> None:
    limiter = Limiter(store, Clock(T0 + 1), lease_s=600)
    admission = await limiter.admit(_principal(tpm=1000, max_concurrent=1), 900)
    admission.release()
    admission.release()  # once only
    usage = await _settled(limiter, store)
    assert (usage.tokens, usage.in_flight) == (0, 0)


async def test_over_rpm_is_a_429_with_the_time_to_the_next_window(store: KeyStore) -> None:
    clock = Clock(T0 + 20)
    limiter = Limiter(store, clock, lease_s=600)
    await limiter.admit(_principal(rpm=1), 1)
    with pytest.raises(RateLimitError) as refused:
        await limiter.admit(_principal(rpm=1), 1)
    assert type(refused.value) is RateLimitError
    assert refused.value.retry_after_ms == 40_000
    clock.now = T0 + 60
    await limiter.admit(_principal(rpm=1), 1)


async def test_concurrency_slots_free_when_requests_end(store: KeyStore) -> None:
    limiter = Limiter(store, Clock(T0 + 1), lease_s=600)
    first = await limiter.admit(_principal(max_concurrent=1), 1)
    with pytest.raises(RateLimitError, match="concurrent"):
        await limiter.admit(_principal(max_concurrent=1), 1)
    first.part_ended(1)
    await limiter.drain()
    await limiter.admit(_principal(max_concurrent=1), 1)


async def test_a_stream_dropped_before_its_usage_is_charged_its_prompt_and_what_it_made(
    store: KeyStore,
) -> None:
    """600 reserved, 500 of them output; three tokens came before the client left."""
    limiter = Limiter(store, Clock(T0 + 1), lease_s=600)
    admission = await limiter.admit(_principal(tpm=1000), 600, output=500)
    stream = cast(AsyncGenerator[pb.GenerateResponse, None], metered(_tokens(5), admission))
    for _ in range(3):
        await anext(stream)
    await stream.aclose()  # the client left before the end
    usage = await _settled(limiter, store)
    assert (usage.tokens, usage.in_flight) == (100 + 3, 0)


async def _tokens(count: int) -> AsyncIterator[pb.GenerateResponse]:
    for _ in range(count):
        yield pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="a")])
    yield pb.GenerateResponse(usage=pb.Usage(prompt_tokens=30, completion_tokens=count))
