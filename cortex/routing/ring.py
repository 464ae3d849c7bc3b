"""A consistent-hash ring over neuron addresses, with virtual nodes.

Each address sits at `virtual_nodes` points of a 64-bit circle (BLAKE2b of
"address#i", so every cortex process places it at the same points); a key
belongs to the first point at or after it, and a walk from the key meets
the addresses in ring order, each once. Adding or removing one neuron moves
only about 1/n of the keys. 160 points per address (as ketama) keep each
neuron's share of random keys within about 10 % of 1/n for 3-8 neurons;
64 left one of 8 with 26 % less than its share. What lives elsewhere: the load bound that
decides whether the walk stops (`prefix_affinity.py`).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Iterator


def point(text: str) -> int:
    """A stable 64-bit position for `text` (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    def __init__(self, addresses: Iterable[str], virtual_nodes: int = 160) -> None:
        if virtual_nodes <= 0:
            raise ValueError("virtual_nodes must be positive")
        self.addresses = frozenset(addresses)
        nodes = sorted(
            (point(f"{address}#{i}"), address)
            for address in self.addresses
            for i in range(virtual_nodes)
        )
        self._points = [p for p, _ in nodes]
        self._owners = [a for _, a in nodes]

    def walk(self, key: int) -> Iterator[str]:
        """Every address once, in ring order from the first point at or after `key`."""
        total = len(self._points)
        start = bisect.bisect_left(self._points, key)
        seen: set[str] = set()
        for step in range(total):
            address = self._owners[(start + step) % total]
            if address not in seen:
                seen.add(address)
                yield address
                if len(seen) == len(self.addresses):
                    return
