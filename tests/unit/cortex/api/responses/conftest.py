"""Fixtures of the Responses tests: a real SQLite store in the test's
temporary directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cortex.store.base import ResponseStore
from cortex.store.sqlite import SqliteResponseStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ResponseStore]:
    s = SqliteResponseStore(tmp_path / "responses.sqlite3")
    yield s
    await s.close()
