"""doctor's engine checks that need no GPU: the model cache (writable, the
models to prepare), the kernel coverage rule, the vLLM version expected."""

from __future__ import annotations

from pathlib import Path

from neuraxis.doctor.engine import _cache, covers, expected_vllm
from neuraxis.doctor.finding import Status
from neuraxis.doctor.host import Host


def neuron_host(directory: Path, cache: Path, extra: str = "") -> Host:
    (directory / "neuron.toml").write_text(f'generation = "cpu"\ncache_dir = "{cache}"\n{extra}')
    return Host(config_dir=directory)


def test_the_cache_and_the_models_to_prepare(tmp_path: Path) -> None:
    finding = _cache(neuron_host(tmp_path, tmp_path / "models"))
    assert finding.status is Status.OK
    assert finding.found.startswith(f"{tmp_path / 'models'}: writable, ")
    assert finding.found.endswith("to prepare: smollm2-135m-instruct")
    agent = _cache(neuron_host(tmp_path, tmp_path / "models", 'ray_address = "10.0.0.10:6379"\n'))
    assert agent.found.endswith("(--deployment counts them)")


def test_a_cache_that_cannot_be_written_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache's parent directory should be
    finding = _cache(neuron_host(tmp_path, blocker / "models"))
    assert finding.status is Status.FAIL
    assert "is not writable" in finding.found
    assert "cache_dir" in finding.advice


def test_the_kernels_a_cuda_build_covers() -> None:
    arches = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    assert covers(arches, (9, 0))  # H100, H200
    assert covers(arches, (8, 7))  # runs sm_80's/sm_86's
    assert covers(arches, (12, 1))
    assert not covers(["sm_80", "sm_86"], (9, 0))
    assert covers(["compute_80"], (9, 0))  # PTX, compiled at load


def test_the_expected_vllm_is_the_pinned_one() -> None:
    assert expected_vllm() == "0.32.0"
