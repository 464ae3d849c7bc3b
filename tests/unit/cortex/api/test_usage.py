"""GET /v1/usage on the admin app over a real SQLite ledger: its parameters
(400s naming the one at fault), and the same page as `neuraxis usage
--format json` over the same store at the same moment."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from cortex.admin import create_admin_app
from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import HOUR_S, UsageCounts, UsageKey
from cortex.store.usage_report import DAY_S
from neuraxis.cli import main
from tests.unit.cortex.api.fakes import ScriptedPool

NOW = 20_000 * DAY_S + 5 * HOUR_S + 17


async def _fill(state_dir: Path) -> None:
    store = SqliteTenantStore(state_dir / "responses.sqlite3")
    rows = {
        UsageKey(tenant, f"key_{tenant}", model, "default", NOW // HOUR_S * HOUR_S - h * HOUR_S): (
            UsageCounts(h + 1, 10 * (h + 1), h, 3, 0, 1.0, 0.0)
        )
        for tenant in ("a", "b")
        for model in ("m1", "m2")
        for h in (0, 3, 30)
    }
    await store.add_usage(rows)
    await store.close()


def _client(store: SqliteTenantStore | None) -> httpx.AsyncClient:
    app = create_admin_app(ScriptedPool([]), store)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin")


@pytest.mark.parametrize(
    ("by", "params"),
    [
        ("day", {"bucket_width": "1d"}),
        ("hour", {"bucket_width": "1h"}),
    ],
)
def test_the_api_and_the_command_give_the_same_page(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    by: str,
    params: dict[str, str],
) -> None:
    # The command runs its own event loop: the rest runs in loops of its own too.
    asyncio.run(_fill(tmp_path))
    monkeypatch.setattr("time.time", lambda: float(NOW))
    assert main(["usage", "--by", by, "--since", "2d", "--format", "json", "--tenant", "a",
                 "--state-dir", str(tmp_path)]) == 0  # fmt: skip
    from_cli = json.loads(capsys.readouterr().out)
    query = {"start_time": str(NOW - 2 * DAY_S), "end_time": str(NOW + 1), "tenant": "a", **params}

    async def ask() -> httpx.Response:
        store = SqliteTenantStore(tmp_path / "responses.sqlite3")
        async with _client(store) as client:
            answer = await client.get("/v1/usage", params=query)
        await store.close()
        return answer

    answer = asyncio.run(ask())
    assert answer.status_code == 200
    assert answer.json() == from_cli
    totals = sum(r["num_model_requests"] for b in from_cli["data"] for r in b["results"])
    assert totals == 2 * (1 + 4 + 31)


async def test_group_by_and_models_filter(tmp_path: Path) -> None:
    await _fill(tmp_path)
    store = SqliteTenantStore(tmp_path / "responses.sqlite3")
    query = f"start_time={NOW - 3 * DAY_S}&end_time={NOW + 1}&group_by=model,tenant&models[]=m2"
    async with _client(store) as client:
        answer = (await client.get(f"/v1/usage?{query}&bucket_width=1d")).json()
    await store.close()
    results = [r for b in answer["data"] for r in b["results"]]
    assert {(r["model"], r["tenant"]) for r in results} == {("m2", "a"), ("m2", "b")}
    assert all(r["api_key_id"] is None for r in results)


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("", "start_time"),
        ("start_time=yesterday", "start_time"),
        ("start_time=0&bucket_width=1w", "bucket_width"),
        ("start_time=0&group_by=colour", "group_by"),
        ("start_time=100&end_time=50", "end_time"),
    ],
)
async def test_bad_parameters_are_400s_naming_them(tmp_path: Path, query: str, param: str) -> None:
    store = SqliteTenantStore(tmp_path / "responses.sqlite3")
    async with _client(store) as client:
        answer = await client.get(f"/v1/usage?{query}")
    await store.close()
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


async def test_without_a_ledger_it_is_a_404() -> None:
    async with _client(None) as client:
        answer = await client.get("/v1/usage?start_time=0")
    assert answer.status_code == 404
