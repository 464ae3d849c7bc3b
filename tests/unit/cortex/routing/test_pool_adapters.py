"""The pool and LoRA adapters, with in-memory neurons: a request routed to
the replica holding its adapter, else one with room (which then holds it
for the next request, even past a report taken while it loaded), with
prefix hashes of its own; an adapter added on
every replica (a source the first refuses reaching no other) and removed."""

from __future__ import annotations

import asyncio

import pytest

from axon.errors import InvalidRequestError
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


async def test_a_source_the_first_replica_refuses_reaches_no_other() -> None:
    first, second = _neuron("n1:1", []), _neuron("n2:1", [])
    first.adapter_error = InvalidRequestError("no adapter_config.json", param="source")
    pool = await pools.polled(pools.fake_pool([first, second], policy=pools.Recorder()))
    with pytest.raises(InvalidRequestError, match="adapter_config"):
        await pool.add_adapter("m", "c", "/adapters/c")
    assert [m.id for m in second.models] == ["m", "a", "b"]  # never asked
    first.adapter_error = None
    assert await pool.add_adapter("m", "c", "/adapters/c") == ["n1:1", "n2:1"]
    assert "c" in pool.served_models()
    assert await pool.remove_adapter("c") == ["n1:1", "n2:1"]
    assert "c" not in pool.served_models()


async def test_a_report_taken_while_it_loads_does_not_forget_it() -> None:
    full, roomy = _neuron("n1:1", ["b"]), _neuron("n2:1", [])
    held_open = asyncio.Event()
    roomy.script = [text("hi"), held_open, DONE]
    policy = pools.Recorder()
    pool = await pools.polled(pools.fake_pool([full, roomy], policy=policy))
    first = pool.generate(pools.request("a", "r1"))
    await pools.first_message(first)  # in flight on n2
    # Both poll answers come while n2's engine has not yet reported "a"
    # (its load under way), and n1 now has room too.
    full.max_adapters = 2
    await pool.refresh()
    await pool.refresh_load()
    held_open.set()
    await pools.texts(first)  # nothing of "a" in flight any more
    roomy.script = [text("hi"), DONE]
    await pools.texts(pool.generate(pools.request("a", "r2")))
    # n2 holds it (as far as cortex knows until n2's next report): no
    # second load on n1.
    assert [c.address for c in policy.candidates[1]] == ["n2:1"]
