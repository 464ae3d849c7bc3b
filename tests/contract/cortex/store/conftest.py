"""What the store contract tests share: one throwaway PostgreSQL server per
package run (each test makes a fresh database in it: harness/postgres.py),
and the store under test on each backend: a contract module names its two
classes in a `store_classes` fixture, and its tests take `open_store` (a
factory; calling it again opens the same data, a restarted cortex) or
`store` (one store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.postgres import postgres_server
from tests.contract.cortex.store import backends


@pytest.fixture(scope="package")
def postgres_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(params=backends.BACKENDS)
async def open_store(
    request: pytest.FixtureRequest, tmp_path: Path, store_classes: tuple[Any, Any]
) -> AsyncIterator[Callable[[], Any]]:
    sqlite, postgres = store_classes
    async with backends.opener(request, tmp_path, sqlite, postgres) as open_one:
        yield open_one


@pytest.fixture
def store(open_store: Callable[[], Any]) -> Any:
    return open_store()
