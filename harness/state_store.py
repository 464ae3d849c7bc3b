"""A store of cortex's state (keys, tenants), opened from the flags a cortex
was started with (`--state-dir DIR` or `--postgres-dsn DSN`) and used once,
then closed, as a `neuraxis keys` or `neuraxis tenants` command does: how a
test writes what an operator would, without a process start for each."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

T = TypeVar("T")


class _Closes(Protocol):
    async def close(self) -> None: ...


S = TypeVar("S", bound=_Closes)


def with_store(
    open_store: Callable[[Path, str | None], S],
    flags: Sequence[str],
    use: Callable[[S], Awaitable[T]],
) -> T:
    """`use(store)` on the store `open_store(state_dir, postgres_dsn)` opens
    for these two flags (as open_key_store and open_tenant_store take them)."""
    flag, value = flags
    store = open_store(Path(value), value if flag == "--postgres-dsn" else None)

    async def run() -> T:
        try:
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(run())
