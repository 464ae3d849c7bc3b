"""`neuraxis usage` on a state directory's ledger, in process: the table
and CSV by model and key, and durations it cannot read refused with 2.
(Its JSON is GET /v1/usage's page: tests/unit/cortex/api/test_usage.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import UsageCounts, UsageKey, hour_of
from neuraxis.cli import main


def _fill(state_dir: Path) -> None:
    async def fill() -> None:
        store = SqliteTenantStore(state_dir / "responses.sqlite3")
        hour = hour_of(time.time())
        await store.add_usage(
            {
                UsageKey("a", "key_1", "m1", "default", hour): UsageCounts(2, 20, 4, 6, 1),
                UsageKey("a", "key_1", "m2", "default", hour): UsageCounts(1, 5, 0, 1),
                UsageKey("b", "key_2", "m1", "batch", hour - 3600): UsageCounts(3, 30, 0, 9),
            }
        )
        await store.close()

    asyncio.run(fill())


def test_by_model_as_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(tmp_path)
    assert main(["usage", "--by", "model", "--state-dir", str(tmp_path)]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        ["MODEL", "REQUESTS", "INPUT", "CACHED", "OUTPUT", "ERRORS"],
        ["m1", "5", "50", "4", "15", "1"],
        ["m2", "1", "5", "0", "1", "0"],
    ]


def test_by_key_as_csv_for_one_tenant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(tmp_path)
    argv = ["usage", "--by", "key", "--format", "csv", "--tenant", "a", "--since", "30m"]
    assert main([*argv, "--state-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "TENANT,KEY,REQUESTS,INPUT,CACHED,OUTPUT,ERRORS",
        "a,key_1,3,25,4,7,1",
    ]


@pytest.mark.parametrize("since", ["7", "0d", "1w", "-2h"])
def test_a_duration_it_cannot_read_is_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], since: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["usage", f"--since={since}", "--state-dir", str(tmp_path)])
    assert exited.value.code == 2
    assert "is not a duration" in capsys.readouterr().err


def test_too_many_buckets_is_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--by", "hour", "--since", "90d", "--state-dir", str(tmp_path)]) == 2
    assert "buckets" in capsys.readouterr().err
