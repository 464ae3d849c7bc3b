"""The consistent-hash ring: each address once per walk, few keys move when
the membership changes."""

from __future__ import annotations

import random

import pytest

from cortex.routing.ring import HashRing

ADDRESSES = [f"ring-{i}:1" for i in range(5)]


def _keys(seed: int, count: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(64) for _ in range(count)]


def test_a_walk_meets_every_address_once() -> None:
    ring = HashRing(ADDRESSES)
    for key in _keys(1, 50):
        walk = list(ring.walk(key))
        assert sorted(walk) == sorted(ADDRESSES)


def test_removing_one_address_moves_only_its_keys() -> None:
    keys = _keys(2, 2000)
    full = HashRing(ADDRESSES)
    smaller = HashRing(ADDRESSES[:-1])
    before = {k: next(full.walk(k)) for k in keys}
    after = {k: next(smaller.walk(k)) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == ADDRESSES[-1] for k in moved)
    # Its keys go to the next address on the ring, the one a walk meets second.
    assert all(after[k] == list(full.walk(k))[1] for k in moved)
    assert 200 < len(moved) < 700  # about a fifth of the keys were on it


def test_virtual_nodes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        HashRing(ADDRESSES, virtual_nodes=0)
