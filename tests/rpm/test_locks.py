"""The GPU flavours' lock files resolve for the target (CPython 3.11, x86_64,
glibc 2.34) as they stand: complete, every pinned wheel on the index with the
locked hash, and still what pyproject.toml and rpm/lock.py ask for. Their
binary RPMs are not built here (~4 GB of CUDA wheels and ~20 GB of disk a flavour)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.rpm.conftest import GPU_FLAVOURS, ROOT


@pytest.mark.parametrize("flavour", GPU_FLAVOURS)
def test_the_lock_resolves(flavour: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "rpm" / "lock.py"), "--check", flavour],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    print(result.stdout.strip())
