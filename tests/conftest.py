"""Session-wide real processes, started once because the engine takes ~30 s
and shared by every test that asks for them: tests/integration/ and the
benchmark smoke runs in tests/bench/. Unit tests never ask for them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.stacks import SimStack, Stack, close_clients, embedded_stack, simulated_stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that end the shared stack (`ends_stack`) run after every
    other, in their own order: sorting is stable."""
    items.sort(key=lambda item: item.get_closest_marker("ends_stack") is not None)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Each test's OpenAI clients are closed when it ends, not by the garbage
    collector in some later test."""
    yield
    close_clients()


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def stack(logs_dir: Path) -> Iterator[Stack]:
    with embedded_stack(logs_dir) as running:
        yield running


@pytest.fixture(scope="session")
def sim_stack(logs_dir: Path) -> Iterator[SimStack]:
    with simulated_stack(logs_dir) as running:
        yield running
