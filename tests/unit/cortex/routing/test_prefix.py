"""Prefix-block hashes of internal requests: chained, most stable part first,
partial blocks left out, salted by a prompt_cache_key."""

from __future__ import annotations

import pytest

from axon.v1 import neuron_pb2 as pb
from cortex.routing.prefix import PrefixHasher, serialize

HASHER = PrefixHasher(block_bytes=32, max_blocks=64)
SYSTEM = "You are a careful assistant. Answer briefly and cite sources."
TOOL = pb.Tool(name="lookup", description="Find a page", parameters_json='{"type":"object"}')


def _chat(*turns: tuple[str, str], tools: list[pb.Tool] | None = None) -> pb.GenerateRequest:
    messages = [pb.ChatMessage(role=role, content=content) for role, content in turns]
    return pb.GenerateRequest(model="m", messages=messages, tools=tools or [])


def test_a_later_turn_keeps_every_earlier_full_block() -> None:
    first = HASHER.blocks(_chat(("system", SYSTEM), ("user", "What is a prefix cache?")))
    later = HASHER.blocks(
        _chat(
            ("system", SYSTEM),
            ("user", "What is a prefix cache?"),
            ("assistant", "A cache of attention state for a prompt's beginning."),
            ("user", "And why route on it?"),
        )
    )
    assert len(later) > len(first) >= 2
    assert later[: len(first)] == first


def test_each_block_covers_everything_before_it() -> None:
    a = HASHER.blocks(_chat(("system", SYSTEM), ("user", "x" * 200)))
    b = HASHER.blocks(_chat(("system", SYSTEM.replace("careful", "CAREFUL")), ("user", "x" * 200)))
    # The change is in the first block: no later block may agree either,
    # although the bytes of the later blocks are the same.
    assert all(x != y for x, y in zip(a, b, strict=True))


def test_system_turns_and_tools_lead_wherever_they_are_given() -> None:
    leading = _chat(("system", SYSTEM), ("user", "hi"), tools=[TOOL])
    mixed = _chat(("user", "hi"), ("system", SYSTEM), tools=[TOOL])
    assert serialize(leading) == serialize(mixed)
    assert serialize(leading).index(b"lookup") < serialize(leading).index(b"hi")


def test_a_partial_last_block_is_left_out_but_a_short_prompt_has_a_key() -> None:
    data = serialize(_chat(("user", "y" * 100)))
    assert len(HASHER.blocks(_chat(("user", "y" * 100)))) == len(data) // 32
    short = HASHER.blocks(_chat(("user", "hi")))
    assert len(short) == 1
    assert short != HASHER.blocks(_chat(("user", "ho")))
    assert HASHER.blocks(pb.GenerateRequest(model="m")) == ()


def test_only_the_first_max_blocks_are_hashed() -> None:
    request = _chat(("user", "z" * 1000))
    assert PrefixHasher(block_bytes=32, max_blocks=3).blocks(request) == HASHER.blocks(request)[:3]


def test_a_raw_prompt_is_hashed_as_well() -> None:
    completion = pb.GenerateRequest(model="m", prompt="Once upon a time " * 10)
    assert len(HASHER.blocks(completion)) >= 5


def test_a_prompt_cache_key_separates_otherwise_equal_prefixes() -> None:
    request = _chat(("system", SYSTEM), ("user", "hello"))
    plain = HASHER.blocks(request)
    assert HASHER.blocks(request, salt="tenant-a") == HASHER.blocks(request, salt="tenant-a")
    assert HASHER.blocks(request, salt="tenant-a")[0] != HASHER.blocks(request, salt="tenant-b")[0]
    assert HASHER.blocks(request, salt="tenant-a")[0] != plain[0]


def test_the_hashes_do_not_depend_on_the_process() -> None:
    # BLAKE2b, not the per-process salted hash(): a value fixed here holds in
    # every cortex process and after restarts.
    request = pb.GenerateRequest(model="m", prompt="fixed")
    assert PrefixHasher().blocks(request) == (0x3B6856524DD793AF,)


def test_block_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PrefixHasher(block_bytes=0)
