"""Mutual TLS as installed: the files neuraxis-cortex's post-install makes
where the packaged configs look for them, each key readable by its service's
user alone (the CA's by root), and what cortex's user can and cannot read."""

from __future__ import annotations

import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.rpm.conftest import as_installed, scratch_ids

TLS = Path("etc/neuraxis/tls")


def test_the_packaged_configs_name_the_files_made_at_install(scratch_root: Path) -> None:
    for config, stem in (("cortex.toml", "cortex"), ("neuron.toml", "neuron")):
        settings = tomllib.loads((scratch_root / "etc/neuraxis" / config).read_text())
        names = {key: settings[key] for key in ("tls_ca", "tls_cert", "tls_key")}
        assert names == {
            "tls_ca": "/etc/neuraxis/tls/ca.crt",
            "tls_cert": f"/etc/neuraxis/tls/{stem}.crt",
            "tls_key": f"/etc/neuraxis/tls/{stem}.key",
        }
        for path in names.values():
            assert (scratch_root / path.lstrip("/")).is_file(), path
        assert "plaintext" not in settings


def test_each_key_is_its_services_alone(scratch_root: Path) -> None:
    users, groups = scratch_ids(scratch_root)

    def owned(name: str) -> tuple[int, int, int]:
        found = (scratch_root / TLS / name).stat()
        return found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)

    assert owned(".") == (0, groups["neuraxis"], 0o750)
    assert owned("ca.key") == (0, 0, 0o600)
    assert owned("cortex.key") == (*users["neuraxis-cortex"], 0o600)
    assert owned("neuron.key") == (*users["neuraxis"], 0o600)
    for name in ("ca.crt", "cortex.crt", "neuron.crt"):
        assert owned(name) == (0, 0, 0o644), name


@pytest.mark.parametrize(
    ("user", "readable", "unreadable"),
    [
        (
            "neuraxis-cortex",
            ["tls/ca.crt", "tls/cortex.crt", "tls/cortex.key", "cortex.toml", "ray-auth-token"],
            ["tls/ca.key", "tls/neuron.key"],
        ),
        (
            "neuraxis",
            ["tls/ca.crt", "tls/neuron.crt", "tls/neuron.key", "neuron.toml", "ray-auth-token"],
            ["tls/ca.key", "tls/cortex.key"],
        ),
    ],
)
def test_what_each_services_user_reads_in_etc(
    scratch_root: Path, tmp_path: Path, user: str, readable: list[str], unreadable: list[str]
) -> None:
    """As the unit runs it: its user and, as a supplementary group, neuraxis
    (cortex's SupplementaryGroups=; the neurons' own primary group)."""
    users, groups = scratch_ids(scratch_root)
    uid, gid = users[user]
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={groups['neuraxis']}"]
    results = {}
    for name in readable + unreadable:
        command = [*as_user, "cat", f"/etc/neuraxis/{name}"]
        result = subprocess.run(
            as_installed(scratch_root, tmp_path / name.replace("/", "-"), command),
            capture_output=True,
            text=True,
        )
        results[name] = "read" if result.returncode == 0 else result.stderr.strip()
    assert {name: results[name] for name in readable} == dict.fromkeys(readable, "read")
    for name in unreadable:
        assert "Permission denied" in results[name], (name, results[name])
