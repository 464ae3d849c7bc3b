"""Session-wide real processes, started once because the engine takes ~30 s
and shared by every test that asks for them: tests/integration/ and the
benchmark smoke runs in tests/bench/. Unit tests never ask for them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.lanes import Turns
from harness.stacks import SimStack, Stack, close_clients, embedded_stack, simulated_stack


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane",
        choices=["stack", "rest"],
        help="only the tests on the session's real stack (the `stack` fixture), or only "
        "the others: `make test` runs both side by side (harness/lanes.py)",
    )


def on_stack(item: pytest.Item) -> bool:
    """In the stack lane: the tests on the real stack, and those marked
    `stack_lane` to even out the lanes' times."""
    uses = "stack" in getattr(item, "fixturenames", ())
    return uses or item.get_closest_marker("stack_lane") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --lane, only that lane's tests. The tests that end the shared
    stack (`ends_stack`) run after every other, in their own order: sorting
    is stable."""
    lane = config.getoption("--lane")
    if lane is not None:
        kept = [item for item in items if on_stack(item) == (lane == "stack")]
        dropped = [item for item in items if on_stack(item) != (lane == "stack")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    items.sort(key=lambda item: item.get_closest_marker("ends_stack") is not None)


TURNS = Turns()


def _quiet(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("quiet") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test (its fixtures' setup and teardown included) in its lane's
    turn: alone if it is marked `quiet` (harness/lanes.py)."""
    with TURNS.turn(_quiet(item), _quiet(nextitem)):
        return (yield)


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
