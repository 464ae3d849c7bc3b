"""Tokenize and Detokenize: the servicer over gRPC with the sim engine's
tokenizer (a token per UTF-8 byte, a BOS token, `<|role|>` lines)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from axon.errors import InvalidRequestError, ModelNotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import NeuronClient
from neuron.engine.sim import SIM_BOS, SimEngine, SimOptions
from tests.unit.neuron.sim_neuron import sim_neuron_client


@pytest.fixture
async def client() -> AsyncIterator[NeuronClient]:
    engine = SimEngine(SimOptions(served_id="m", max_context_length=1024))
    async with sim_neuron_client(engine) as neuron:
        yield neuron


async def test_a_prompt_is_tokenized_with_or_without_special_tokens(client: NeuronClient) -> None:
    plain = pb.TokenizeRequest(request_id="t1", model="m", prompt="hé", return_token_strs=True)
    answer = await client.tokenize(plain, timeout=10)
    assert (list(answer.tokens), answer.max_model_len) == ([104, 0xC3, 0xA9], 1024)
    assert list(answer.token_strs) == ["h", "Ã", "©"]
    special = pb.TokenizeRequest(request_id="t2", model="m", prompt="h", add_special_tokens=True)
    answer = await client.tokenize(special, timeout=10)
    assert (list(answer.tokens), list(answer.token_strs)) == ([SIM_BOS, 104], [])


async def test_messages_go_through_the_chat_template(client: NeuronClient) -> None:
    request = pb.TokenizeRequest(
        request_id="t1",
        model="m",
        messages=[pb.ChatMessage(role="user", content="hi")],
        add_generation_prompt=True,
    )
    answer = await client.tokenize(request, timeout=10)
    assert bytes(answer.tokens).decode() == "<|user|>hi\n<|assistant|>"
    request.add_generation_prompt = False
    answer = await client.tokenize(request, timeout=10)
    assert bytes(answer.tokens).decode() == "<|user|>hi\n"


async def test_tokens_come_back_as_the_text(client: NeuronClient) -> None:
    tokens = [SIM_BOS, *"héllo".encode()]
    request = pb.DetokenizeRequest(request_id="d1", model="m", tokens=tokens)
    assert (await client.detokenize(request, timeout=10)).prompt == "<s>héllo"


async def test_refusals_are_typed(client: NeuronClient) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        await client.detokenize(pb.DetokenizeRequest(model="m", tokens=[1, 300]), timeout=10)
    assert refused.value.param == "tokens" and "300" in refused.value.message
    with pytest.raises(ModelNotFoundError):
        await client.tokenize(pb.TokenizeRequest(model="x", prompt="a"), timeout=10)
