"""Session-wide real processes, started once because the engine takes ~30 s
and shared by every test that asks for them: tests/integration/ and the
benchmark smoke runs in tests/bench/. Unit tests never ask for them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.lanes import LANES, Turns
from harness.stacks import SimStack, Stack, close_clients, embedded_stack, simulated_stack


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane",
        choices=LANES,
        help="only one lane's tests (lane_of): `make test` runs every lane side by side "
        "(harness/lanes.py)",
    )


# The folders whose tests are unit-sized (no engine, no cluster): never
# in the stack lane.
UNIT_FOLDERS = ("unit", "contract", "fuzz")
TESTS = Path(__file__).parent


def _in_unit_folder(path: Path) -> bool:
    parts = path.relative_to(TESTS).parts
    return bool(parts) and parts[0] in UNIT_FOLDERS


def lane_of(item: pytest.Item) -> str:
    """The lane a test runs in: "stack" for the tests on the session's real
    stack and those marked `lane("stack")` (engines or clusters of their
    own, placed there to even out the lanes' times); "rest" for the others,
    tests/unit, tests/contract and tests/fuzz always."""
    if _in_unit_folder(item.path):
        return "rest"
    if "stack" in getattr(item, "fixturenames", ()):
        return "stack"
    marker = item.get_closest_marker("lane")
    return "rest" if marker is None else str(marker.args[0])


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The stack lane does not collect the unit folders: importing their
    2,000 tests' modules cost it ~10 s of CPU for none of its tests."""
    if config.getoption("--lane") != "stack" or not collection_path.is_relative_to(TESTS):
        return None
    return True if collection_path != TESTS and _in_unit_folder(collection_path) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --lane, only that lane's tests. The tests that end the shared
    stack (`ends_stack`) run after every other, in their own order: sorting
    is stable."""
    lane = config.getoption("--lane")
    if lane is not None:
        for item in items:
            if lane_of(item) not in LANES:
                raise pytest.UsageError(f"{item.nodeid}: no lane {lane_of(item)!r}")
        kept = [item for item in items if lane_of(item) == lane]
        dropped = [item for item in items if lane_of(item) != lane]
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
