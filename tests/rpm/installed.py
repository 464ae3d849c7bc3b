"""What the tests of the installed packages share: the units' commands and
environments as systemd would run them, and the installed command."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from tests.rpm.test_units import unit_settings


def unit_command(root: Path, unit: str) -> list[str]:
    (command,) = unit_settings(root, unit)["ExecStart"]
    return shlex.split(command)


def unit_env(root: Path, unit: str) -> dict[str, str]:
    """This process's environment (PATH and the like) without any neuraxis or
    Ray settings of its own, plus the unit's Environment= settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURAXIS_", "RAY_"))}
    for assignment in shlex.split(" ".join(unit_settings(root, unit)["Environment"])):
        key, _, value = assignment.partition("=")
        env[key] = value
    return env


def neuraxis(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed /usr/bin/neuraxis, run from the scratch root."""
    return subprocess.run(
        [str(root / "usr/bin/neuraxis"), *args], capture_output=True, text=True, cwd=cwd
    )
