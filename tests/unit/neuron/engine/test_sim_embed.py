"""The sim engine as an embedding model (`--task embed`): a vector per
input and its token count; it generates nothing, and a generating sim
embeds nothing, each refusing as a real engine of the other task does."""

from __future__ import annotations

import pytest

from axon.errors import InvalidRequestError
from axon.tasks import ModelTask
from neuron.engine.base import EmbedRequest, EngineRequest, Message, Sampling
from neuron.engine.sim import SimEngine, SimOptions


async def test_an_embedding_sim_embeds_each_input() -> None:
    engine = SimEngine(SimOptions(served_id="e", ttft_s=0, task=ModelTask.EMBED))
    assert engine.models()[0].task is ModelTask.EMBED
    result = await engine.embed(EmbedRequest("r", "e", ("one two", (5, 6, 7))))
    assert result.embeddings == [[2.0, 7.0, 1.0], [3.0, 3.0, 1.0]]
    assert result.prompt_tokens == 5
    request = EngineRequest("r", "e", (Message(role="user", content="hi"),), Sampling())
    with pytest.raises(InvalidRequestError, match="embedding model"):
        await anext(engine.generate(request))


async def test_a_generating_sim_refuses_to_embed() -> None:
    engine = SimEngine(SimOptions(served_id="m", ttft_s=0))
    with pytest.raises(InvalidRequestError, match="cannot embed"):
        await engine.embed(EmbedRequest("r", "m", ("x",)))
