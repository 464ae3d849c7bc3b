"""`neuraxis tenants set | list | show` on a state directory, in process:
a change keeps what it does not name, the store cortex opens sees it, and
invalid weights and classes are refused with status 2."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cortex.store.tenants import Tenant, open_tenant_store
from neuraxis.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _stored(state_dir: Path, name: str) -> Tenant | None:
    async def read() -> Tenant | None:
        store = open_tenant_store(state_dir, None)
        try:
            return await store.get(name)
        finally:
            await store.close()

    return asyncio.run(read())


def test_set_changes_only_what_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path)]
    assert _run(capsys, "tenants", "set", "acme", "--weight", "3", "--tpm", "900", *state)[0] == 0
    code, out, _ = _run(capsys, "tenants", "set", "acme", "--max-priority", "interactive", *state)
    assert code == 0
    expected = Tenant("acme", 3.0, "interactive", None, 900)
    assert json.loads(out)["max_priority"] == "interactive"
    assert _stored(tmp_path, "acme") == expected


def test_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path)]
    _run(capsys, "tenants", "set", "b", "--max-concurrent", "4", *state)
    _run(capsys, "tenants", "set", "a", "--weight", "0.5", *state)
    code, out, _ = _run(capsys, "tenants", "list", "--json", *state)
    assert code == 0 and [v["name"] for v in json.loads(out)] == ["a", "b"]
    code, out, _ = _run(capsys, "tenants", "list", *state)
    lines = out.splitlines()
    assert lines[0].split() == ["TENANT", "WEIGHT", "MAX", "PRIORITY", "CONC", "TPM"]
    assert lines[1].split() == ["a", "0.5", "default", "-", "-"]
    assert lines[2].split() == ["b", "1", "default", "4", "-"]
    code, out, _ = _run(capsys, "tenants", "show", "nobody", *state)
    view = json.loads(out)
    assert code == 0 and view["stored"] is False and view["weight"] == 1.0


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--weight", "0", "is not a number above 0"),
        ("--weight", "-1", "is not a number above 0"),
        ("--weight", "nan", "is not a number above 0"),
        ("--max-priority", "urgent", "invalid choice"),
        ("--tpm", "0", "is not a positive whole number"),
        ("--max-concurrent", "x", "is not a positive whole number"),
    ],
)
def test_invalid_values_are_refused_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, says: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tenants", "set", "acme", option, value, "--state-dir", str(tmp_path)])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
    assert _stored(tmp_path, "acme") is None
