"""The pool's routing of a request for a LoRA adapter, with in-memory
neurons: the replica holding it first, else one with room (which then
holds it for the next request), and prefix hashes of its own."""

from __future__ import annotations

import asyncio

from axon.v1 import neuron_pb2 as pb
from cortex.routing.prefix import PrefixHasher
from tests.unit.cortex.routing import pools
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, text


def _neuron(address: str, held: list[str]) -> FakeNeuron:
    neuron = FakeNeuron(address)
    neuron.models += [
        pb.ModelInfo(id=a, parent="m", max_context_length=100, task=pb.MODEL_TASK_GENERATE)
        for a in ("a", "b")
    ]
    neuron.adapters, neuron.max_adapters = held, 1
    return neuron


async def test_the_replica_holding_the_adapter_takes_its_request() -> None:
    policy = pools.Recorder()
    pool = await pools.polled(
        pools.fake_pool([_neuron("n1:1", []), _neuron("n2:1", ["a"])], policy=policy)
    )
    await pools.texts(pool.generate(pools.request("a")))
    assert [c.address for c in policy.candidates[0]] == ["n2:1"]
    # The base model's requests see every replica.
    await pools.texts(pool.generate(pools.request("m")))
    assert [c.address for c in policy.candidates[1]] == ["n1:1", "n2:1"]


async def test_none_holding_it_it_loads_where_there_is_room_and_stays() -> None:
    full, roomy = _neuron("n1:1", ["b"]), _neuron("n2:1", [])
    held_open = asyncio.Event()
    roomy.script = [text("hi"), held_open, DONE]
    policy = pools.Recorder()
    pool = await pools.polled(pools.fake_pool([full, roomy], policy=policy))
    first = pool.generate(pools.request("a", "r1"))
    await pools.first_message(first)  # in flight on n2, its load under way
    roomy.script = [text("hi"), DONE]  # the next request's: not held open
    await pools.texts(pool.generate(pools.request("a", "r2")))
    held_open.set()
    await pools.texts(first)
    assert [[c.address for c in shown] for shown in policy.candidates] == [["n2:1"], ["n2:1"]]


async def test_an_adapters_prefix_hashes_are_its_own() -> None:
    policy = pools.Recorder(PrefixHasher(block_bytes=16))
    pool = await pools.polled(pools.fake_pool([_neuron("n1:1", [])], policy=policy))
    for model in ("m", "a", "b"):
        request = pools.request(model)
        request.prompt = "the same prompt, long enough for a block or two"
        await pools.texts(pool.generate(request))
    prefixes = [route.prefix for route in policy.routes]
    assert len(set(prefixes)) == 3 and all(prefixes)
