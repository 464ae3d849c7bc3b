"""The auth tests' key store: a real SQLite one in the test's temporary
directory, closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cortex.store.sqlite_keys import SqliteKeyStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteKeyStore]:
    opened = SqliteKeyStore(tmp_path / "responses.sqlite3")
    yield opened
    await opened.close()
