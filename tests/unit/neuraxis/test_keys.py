"""`neuraxis keys create | list | revoke` on a state directory, in process:
the secret printed once and never again, the listing, revocation, and the
same store cortex opens with the same settings."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from stat import S_ISDIR
from typing import Any

import pytest

from cortex.auth.keys import hash_key
from cortex.config import CortexSettings, StoreSettings
from cortex.store.keys import open_key_store
from neuraxis.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_prints_the_key_once_and_cortex_finds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(
        capsys, "keys", "create", "--tenant", "acme", "--models", "a, b", "--rpm", "9",
        "--state-dir", str(tmp_path),
    )  # fmt: skip
    assert code == 0
    secret = out.strip()
    assert secret.startswith("nx-") and "\n" not in secret
    assert "shown only this once" in err

    settings = CortexSettings(store=StoreSettings(state_dir=tmp_path))

    async def found() -> tuple[str, list[str], int | None] | None:
        store = open_key_store(settings.store.state_dir, settings.store.postgres_dsn)
        try:
            record = await store.by_hash(hash_key(secret))
        finally:
            await store.close()
        return None if record is None else (record.tenant, record.models, record.rpm)

    assert asyncio.run(found()) == ("acme", ["a", "b"], 9)
    code, listed, _ = _run(capsys, "keys", "list", "--json", "--state-dir", str(tmp_path))
    assert code == 0 and secret not in listed and hash_key(secret) not in listed


def test_list_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path)]
    _run(capsys, "keys", "create", "--tenant", "one", *state)
    _run(capsys, "keys", "create", "--tenant", "two", "--tpm", "100", *state)
    code, out, _ = _run(capsys, "keys", "list", "--json", *state)
    views = json.loads(out)
    assert code == 0 and {v["tenant"] for v in views} == {"one", "two"}
    assert all(next(iter(v)) == "id" for v in views)
    two = next(v for v in views if v["tenant"] == "two")
    assert (two["tpm"], two["rpm"], two["state"], two["last_used_at"]) == (
        100,
        None,
        "active",
        None,
    )

    code, out, _ = _run(capsys, "keys", "revoke", two["id"], *state)
    assert code == 0 and two["id"] in out
    code, _, err = _run(capsys, "keys", "revoke", two["id"], *state)
    assert code == 1 and "no active key" in err
    code, out, _ = _run(capsys, "keys", "list", *state)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "TENANT", "MODELS"]
    (row,) = [line for line in lines if line.startswith(two["id"])]
    assert row.split()[1] == "two" and row.split()[-1] == "revoked"


def test_limits_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["keys", "create", "--tenant", "acme", "--rpm", "0"])
    assert "not a positive number" in capsys.readouterr().err


def test_list_shows_the_cluster_defaults_a_key_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text("[auth]\ndefault_rpm = 60\ndefault_max_concurrent = 4\n")
    state = ["--state-dir", str(tmp_path), "--config", str(config)]
    _run(capsys, "keys", "create", "--tenant", "plain", *state)
    _run(capsys, "keys", "create", "--tenant", "own", "--rpm", "5", *state)
    code, out, _ = _run(capsys, "keys", "list", "--json", *state)
    views = {v["tenant"]: v for v in json.loads(out)}
    assert code == 0 and views["plain"]["rpm"] is None  # the key itself names none
    assert views["plain"]["limits"] == {"rpm": 60, "tpm": None, "max_concurrent": 4}
    assert views["own"]["limits"] == {"rpm": 5, "tpm": None, "max_concurrent": 4}
    code, out, err = _run(capsys, "keys", "list", *state)
    (plain,) = [line.split() for line in out.splitlines() if " plain " in line]
    assert plain[3:6] == ["60*", "-", "4*"]
    assert "cluster's default" in err


def test_root_gives_a_new_sqlite_file_to_the_state_directorys_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = tmp_path.stat()
    chowned: list[tuple[Path, int, int]] = []
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("os.chown", lambda p, u, g: chowned.append((Path(p), u, g)))
    monkeypatch.setattr(Path, "stat", _owned_by(4321, Path.stat))
    state = ["--state-dir", str(tmp_path)]
    code, _, err = _run(capsys, "keys", "create", "--tenant", "acme", *state)
    assert code == 0 and "uid 4321" in err
    assert chowned == [(tmp_path / "responses.sqlite3", 4321, owner.st_gid)]
    _run(capsys, "keys", "list", *state)  # an existing file: left as it is
    assert len(chowned) == 1


def _owned_by(uid: int, stat: Any) -> Any:
    """Path.stat, with directories owned by `uid`."""

    def owned(path: Path, **kwargs: Any) -> Any:
        result = stat(path, **kwargs)
        if not S_ISDIR(result.st_mode):
            return result
        fields = list(result)
        fields[4] = uid  # st_uid
        return os.stat_result(fields)

    return owned


def test_the_state_file_is_its_owners_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, "keys", "create", "--tenant", "acme", "--state-dir", str(tmp_path))[0] == 0
    assert (tmp_path / "responses.sqlite3").stat().st_mode & 0o777 == 0o600
