"""Rate limits where several processes admit for one key (issue 12 point 2):
two cortex instances on one SQLite state directory with the counters in
the store (`--rate-limit-counters shared`, what `--workers N` uses), two
instances sharing one PostgreSQL database, and a cortex with `--workers 2`.
Each time, 50 requests sent at once (spread over the instances in turn)
against a token budget of 10.5 requests are admitted exactly 10 times: the
counters live in the store, and each admission is one transaction that
reads, decides and writes under the key row's lock (SQLite `BEGIN
IMMEDIATE`, PostgreSQL `SELECT ... FOR UPDATE`). Which worker accepts a
connection is the kernel's choice, so the instance pairs are what prove
the budget holds across processes; the workers test checks the same path
is the one `--workers` takes.

The neuron holds every admitted request for SLOW_TTFT_S, so none settles
(gives its tokens back) before all 50 are decided.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cortex.auth.keys import KeyRequest, make_key
from cortex.store.keys import open_key_store
from harness.gateway import Sim, running_cortex, sim_neurons
from harness.postgres import postgres_server
from harness.state_store import with_store

MODEL = "sim-slow"
SLOW_TTFT_S = 3.0
REQUESTS = 50


@dataclass
class Shared:
    """Cortex processes admitting for the same keys, and where the keys live."""

    base_urls: list[str]
    store: list[str]  # the `--state-dir` or `--postgres-dsn` flag and its value
    logs: list[Path]

    def new_key(self, tpm: int) -> str:
        """A key written into the store these cortexes share, as `neuraxis
        keys create` writes it (tests/unit/neuraxis/test_keys.py tests
        the command), without a process start for each."""
        secret, record = make_key(KeyRequest("t", [], tpm=tpm), int(time.time()))
        with_store(open_key_store, self.store, lambda store: store.add(record))
        return secret

    def loggers(self) -> set[str]:
        """Every logger that wrote a line."""
        return {
            json.loads(line)["logger"]
            for log in self.logs
            for line in log.read_text().splitlines()
            if line.startswith("{")
        }


@pytest.fixture(scope="module")
def neuron(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("limits-neuron")
    sim = Sim(MODEL, ["--sim-ttft-s", str(SLOW_TTFT_S)])
    with sim_neurons(logs, "limits", [sim]) as (running,):
        yield running.address


def _cortexes(
    neuron: str, logs: Path, store: list[str], count: int, extra: list[str]
) -> Iterator[Shared]:
    with ExitStack() as stack:
        log_paths = [logs / f"cortex{i}.log" for i in range(count)]
        args = ["--auth", "required", *store, *extra]
        bases = [
            stack.enter_context(running_cortex(log, [neuron], *args)).base_url for log in log_paths
        ]
        yield Shared(bases, store, log_paths)


@pytest.fixture
def two_sqlite_instances(neuron: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    logs = tmp_path_factory.mktemp("limits-sqlite")
    store = ["--state-dir", str(tmp_path_factory.mktemp("limits-sqlite-state"))]
    yield from _cortexes(neuron, logs, store, 2, ["--rate-limit-counters", "shared"])


@pytest.fixture
def two_postgres_instances(
    neuron: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    logs = tmp_path_factory.mktemp("limits-postgres")
    with postgres_server() as dsn:
        yield from _cortexes(neuron, logs, ["--postgres-dsn", dsn], 2, [])


@pytest.fixture
def two_workers(neuron: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    logs = tmp_path_factory.mktemp("limits-workers")
    store = ["--state-dir", str(tmp_path_factory.mktemp("limits-workers-state"))]
    yield from _cortexes(neuron, logs, store, 1, ["--workers", "2"])


async def _at_once(base_urls: list[str], key: str, count: int) -> list[httpx.Response]:
    """`count` requests sent together, spread over the cortexes in turn."""
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as client:
        sent = [
            client.post(f"{base_urls[i % len(base_urls)]}/v1/chat/completions", json=body)
            for i in range(count)
        ]
        return list(await asyncio.gather(*sent))


def _admitted_within_budget(shared: Shared) -> int:
    # One request's reservation, read from its admission's headers.
    probe = shared.new_key(tpm=100_000)
    (first,) = asyncio.run(_at_once(shared.base_urls[:1], probe, 1))
    assert first.status_code == 200, first.text
    reservation = 100_000 - int(first.headers["x-ratelimit-remaining-tokens"])
    budget = reservation * 10 + reservation // 2
    key = shared.new_key(tpm=budget)
    results = asyncio.run(_at_once(shared.base_urls, key, REQUESTS))
    statuses = [r.status_code for r in results]
    assert set(statuses) <= {200, 429}, statuses
    admitted = statuses.count(200)
    print(f"\nadmitted {admitted} of {REQUESTS} within a budget of 10.5 requests")
    return admitted


def test_two_instances_on_one_sqlite_file_admit_exactly_the_budget(
    two_sqlite_instances: Shared,
) -> None:
    assert _admitted_within_budget(two_sqlite_instances) == 10


def test_two_instances_on_postgresql_admit_exactly_the_budget(
    two_postgres_instances: Shared,
) -> None:
    assert _admitted_within_budget(two_postgres_instances) == 10


def test_two_workers_admit_exactly_the_budget_and_log_as_one_process(
    two_workers: Shared,
) -> None:
    assert _admitted_within_budget(two_workers) == 10
    # The workers log as the single process does: no access log, none of
    # uvicorn's start-up lines (uvicorn applies those settings only in the
    # process that builds its config, not in the workers it spawns).
    assert "uvicorn.access" not in two_workers.loggers()
    assert "uvicorn.error" not in two_workers.loggers()
