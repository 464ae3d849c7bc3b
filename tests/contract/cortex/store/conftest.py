"""What the store contract tests share: one throwaway PostgreSQL server per
package run (each test makes a fresh database in it: harness/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.postgres import postgres_server


@pytest.fixture(scope="package")
def postgres_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn
