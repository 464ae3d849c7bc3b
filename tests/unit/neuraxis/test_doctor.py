"""`neuraxis doctor`: the GPU checks on the project's fake NVML (an H100
host, an A100 host, a mixed host, a wrong flavour, an old driver), run as
the command runs on a bare GPU host (vLLM, torch, Ray and FastAPI absent);
the report and the exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.fake_nvml import fake_nvml_env
from neuraxis.cli import build_parser
from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.report import passed, render_json, render_text

H100 = ("NVIDIA H100 80GB HBM3", (9, 0))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
L40S = ("NVIDIA L40S", (8, 9))

# What a bare GPU host lacks: doctor must run without them and say so.
BARE_HOST = """
import importlib.abc, runpy, sys
ABSENT = {"vllm", "torch", "ray", "fastapi", "uvicorn", "starlette", "cryptography", "asyncpg"}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
sys.argv = ["neuraxis doctor", *sys.argv[1:]]
runpy.run_module("neuraxis.doctor", run_name="__main__")
"""


def doctor(
    config_dir: Path,
    devices: list[tuple[str, tuple[int, int]]],
    *args: str,
    driver: str | None = None,
) -> tuple[int, dict[tuple[str, str], dict[str, str]]]:
    """Run `python -m neuraxis.doctor --json` on a bare host whose NVML
    reports `devices`; its exit status and findings by (area, check)."""
    env = fake_nvml_env(devices)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    if driver:
        env["FAKE_NVML_DRIVER"] = driver
    result = subprocess.run(
        [sys.executable, "-c", BARE_HOST, "--json", "--config-dir", str(config_dir), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] == (result.returncode == 0)
    return result.returncode, {(f["area"], f["check"]): f for f in report["findings"]}


def neuron_toml(directory: Path, generation: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / "neuron.toml"
    path.write_text(f'generation = "{generation}"\ncache_dir = "{directory / "models"}"\n')
    return directory


def test_an_h100_host_with_the_hopper_flavour(tmp_path: Path) -> None:
    status, found = doctor(neuron_toml(tmp_path, "hopper"), [H100] * 8, "--area", "gpus")
    assert status == 0
    assert found[("gpus", "driver")]["found"] == "NVIDIA driver 580.95.05"
    assert found[("gpus", "gpu0")]["found"] == (
        "NVIDIA H100 80GB HBM3, 80.0 GiB, compute capability 9.0: hopper"
    )
    assert ("gpus", "gpu7") in found
    assert found[("gpus", "flavour")]["status"] == "ok"
    assert "the host is hopper" in found[("gpus", "flavour")]["found"]


def test_an_a100_host_without_a_neuron_is_told_its_package(tmp_path: Path) -> None:
    (tmp_path / "head.toml").write_text('ray_node_ip = "127.0.0.1"\n')
    status, found = doctor(tmp_path, [A100] * 2, "--area", "gpus")
    assert status == 0
    assert found[("gpus", "flavour")]["found"] == (
        "ampere GPUs: this host's package is neuraxis-neuron-ampere"
    )


def test_a_mixed_host_fails(tmp_path: Path) -> None:
    status, found = doctor(neuron_toml(tmp_path, "ada"), [A100, L40S], "--area", "gpus")
    assert status == 1
    mixed = found[("gpus", "generations")]
    assert mixed["status"] == "fail"
    assert "mixes GPU generations (ada, ampere)" in mixed["found"]
    assert "one generation a host" in mixed["advice"]
    assert ("gpus", "flavour") not in found


def test_a_wrong_flavour_is_found_with_the_package_to_swap_in(tmp_path: Path) -> None:
    status, found = doctor(neuron_toml(tmp_path, "ampere"), [H100] * 2, "--area", "gpus")
    assert status == 1
    wrong = found[("gpus", "flavour")]
    assert wrong["status"] == "fail"
    assert "installed for ampere" in wrong["found"] and "has hopper GPUs" in wrong["found"]
    assert wrong["advice"] == "dnf swap neuraxis-neuron-ampere neuraxis-neuron-hopper"


def test_a_driver_older_than_cuda_13_fails(tmp_path: Path) -> None:
    status, found = doctor(
        neuron_toml(tmp_path, "hopper"), [H100], "--area", "gpus", driver="550.54.15"
    )
    assert status == 1
    assert found[("gpus", "driver")]["status"] == "fail"
    assert "580 or newer" in found[("gpus", "driver")]["advice"]


def test_a_gpu_flavour_on_a_host_without_gpus_fails(tmp_path: Path) -> None:
    status, found = doctor(neuron_toml(tmp_path, "hopper"), [], "--area", "gpus")
    assert status == 1
    assert "installed for hopper GPUs" in found[("gpus", "nvml")]["found"]


def test_a_bare_gpu_host_runs_every_area_and_lacks_the_engine(tmp_path: Path) -> None:
    """No vLLM, torch, Ray, FastAPI or cryptography: every area still
    reports, and the missing engine is a finding with what to install."""
    status, found = doctor(neuron_toml(tmp_path, "hopper"), [H100] * 2)
    assert status == 1
    vllm = found[("engine", "vllm")]
    assert vllm["status"] == "fail" and "not importable" in vllm["found"]
    assert "neuraxis-neuron-<generation>" in vllm["advice"]
    assert found[("engine", "torch")]["status"] == "fail"
    assert found[("engine", "cache")]["status"] == "ok"
    assert found[("gpus", "flavour")]["status"] == "ok"
    assert {area for area, _ in found} == {"gpus", "engine", "cluster", "network", "tls", "state"}
    assert not any(check == "doctor" for _, check in found)  # no check broke


def test_a_config_file_that_does_not_parse_is_a_finding(tmp_path: Path) -> None:
    (tmp_path / "neuron.toml").write_text('generation = "pascal"\n')
    status, found = doctor(tmp_path, [], "--area", "engine")
    assert status == 1
    assert found[("config", "neuron")]["status"] == "fail"
    assert "generation" in found[("config", "neuron")]["found"]


def test_the_report_and_its_exit_status() -> None:
    findings = [
        Finding("gpus", "driver", Status.OK, "NVIDIA driver 580.95.05", "nothing"),
        Finding("tls", "cortex cert", Status.WARN, "expires in 3 days", "renew"),
        Finding("network", "firewalld", Status.SKIP, "not installed"),
    ]
    assert passed(findings)
    text = render_text(findings)
    assert "ok    gpus/driver: NVIDIA driver 580.95.05\n" in text
    assert "nothing" not in text  # advice is printed for what is not ok
    assert "WARN  tls/cortex cert: expires in 3 days\n      -> renew\n" in text
    assert text.endswith("doctor: 0 failed, 1 warnings, 1 passed, 1 not applicable\n")
    failed = [*findings, Finding("state", "store", Status.FAIL, "missing", "mkdir")]
    assert not passed(failed)
    data: dict[str, Any] = json.loads(render_json(failed))
    assert data["passed"] is False
    assert data["findings"][-1] == {
        "area": "state",
        "check": "store",
        "status": "fail",
        "found": "missing",
        "advice": "mkdir",
    }


def test_neuraxis_doctor_is_a_command() -> None:
    args = build_parser().parse_args(["doctor", "--json", "--area", "tls", "--area", "gpus"])
    assert args.command == "doctor" and args.json and args.area == ["tls", "gpus"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["doctor", "--area", "nothing"])
