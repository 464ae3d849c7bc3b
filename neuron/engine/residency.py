"""Which adapters an engine holds, and which one goes when room is needed.

Pure bookkeeping, no I/O and no clock: a bounded set of adapter ids in order
of last use, each with the requests in flight on it. `victim` names the
least recently used adapter with nothing in flight, so that an eviction
never breaks a request. The loads and evictions themselves, and the waits
for them, are adapters.py's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container


class Residency:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("an engine with adapters holds at least one")
        self.capacity = capacity
        # id -> requests in flight; least recently used first.
        self._held: OrderedDict[str, int] = OrderedDict()

    def held(self) -> list[str]:
        """The adapters held, least recently used first."""
        return list(self._held)

    def holds(self, adapter: str) -> bool:
        return adapter in self._held

    def full(self) -> bool:
        return len(self._held) >= self.capacity

    def in_flight(self, adapter: str) -> int:
        return self._held.get(adapter, 0)

    def victim(self, spared: Container[str] = ()) -> str | None:
        """The least recently used adapter with no request in flight and
        not in `spared` (those with requests about to start on them), when
        the set is full; None when there is room, or when every adapter held
        is in use or spared (the caller waits for one to be released)."""
        if not self.full():
            return None
        return next((a for a, n in self._held.items() if n == 0 and a not in spared), None)

    def admit(self, adapter: str) -> None:
        """`adapter` is loaded (the caller made room first)."""
        if adapter not in self._held and self.full():
            raise ValueError(f"no room for adapter '{adapter}': evict one first")
        self._held.setdefault(adapter, 0)
        self._held.move_to_end(adapter)

    def evict(self, adapter: str) -> None:
        if self._held.get(adapter, 0):
            raise ValueError(f"adapter '{adapter}' has requests in flight")
        self._held.pop(adapter, None)

    def acquire(self, adapter: str) -> None:
        """A request starts on a held adapter: it becomes the most recent."""
        self._held[adapter] += 1
        self._held.move_to_end(adapter)

    def release(self, adapter: str) -> None:
        self._held[adapter] -= 1
