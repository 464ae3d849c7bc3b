"""The Ray auth token the cortex package makes at install: its form and
mode, and that it outlives removing and reinstalling the package."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.rpm.conftest import Packages


def test_the_ray_token_is_made_at_install(scratch_root: Path) -> None:
    token = scratch_root / "etc/neuraxis/ray-auth-token"
    assert re.fullmatch(r"[0-9a-f]{64}", token.read_text())
    assert token.stat().st_mode & 0o777 == 0o640


def test_the_ray_token_outlives_removing_and_reinstalling_cortex(
    packages: Packages, tmp_path: Path
) -> None:
    """Removing neuraxis-cortex leaves the token (no package owns it), and a
    reinstall keeps it: the copies on the neuron hosts stay valid."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "urandom").write_bytes(os.urandom(64))
    token = root / "etc/neuraxis/ray-auth-token"

    def rpm(*args: str) -> None:
        result = subprocess.run(
            ["rpm", "--root", str(root), "--nodeps", *args], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    rpm("-i", str(packages.common), str(packages.cortex))
    made = token.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", made)
    rpm("-e", "neuraxis-cortex")
    assert not (root / "usr/lib/systemd/system/neuraxis-cortex.service").exists()
    assert token.read_text() == made
    (root / "dev" / "urandom").write_bytes(os.urandom(64))  # a reinstall would draw anew
    rpm("-i", str(packages.cortex))
    assert token.read_text() == made
