"""The packages installed into a scratch root (`rpm -i --root DIR --nodeps`),
run from there with the host's /usr/bin/python3.11: the command, the config
check, the relocated environments and the engine imports. The neuron's unit
is in test_installed_neuron.py, the head's and cortex's in
test_installed_services.py, the Ray token in test_ray_token.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.rpm.conftest import VERSION, as_installed
from tests.rpm.installed import neuraxis


def test_the_installed_command_runs(scratch_root: Path, tmp_path: Path) -> None:
    result = neuraxis(scratch_root, "--version", cwd=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, f"neuraxis {VERSION}")


def test_the_installed_configs_check(scratch_root: Path, tmp_path: Path) -> None:
    # Where the packages look installed: the configs name /etc/neuraxis/tls,
    # which the check reads.
    etc = Path("/etc/neuraxis")
    command = [str(scratch_root / "usr/bin/neuraxis"), "config", "check"]
    for kind in ("cortex", "neuron", "deployment", "head"):
        command += [f"--{kind}", str(etc / f"{kind}.toml")]
    result = subprocess.run(
        as_installed(scratch_root, tmp_path / "ns", command),
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        str(etc / name) for name in ("cortex.toml", "neuron.toml", "deployment.toml", "head.toml")
    ]
    assert all(": ok" in line for line in lines), lines
    # The cpu flavour's neuron.toml names its generation.
    text = (scratch_root / "etc/neuraxis/neuron.toml").read_text()
    assert 'generation = "cpu"' in text.splitlines()


def test_a_broken_installed_config_is_named(scratch_root: Path, tmp_path: Path) -> None:
    broken = tmp_path / "neuron.toml"
    text = (scratch_root / "etc/neuraxis/neuron.toml").read_text()
    broken.write_text(text.replace('generation = "cpu"', 'generation = "volta"'))
    result = neuraxis(scratch_root, "config", "check", "--neuron", str(broken), cwd=tmp_path)
    assert result.returncode != 0
    assert str(broken) in result.stderr and "generation" in result.stderr, result.stderr


def test_the_environments_are_relocated_and_precompiled(scratch_root: Path) -> None:
    for env in ("cortex", "neuron"):
        base = scratch_root / "opt/neuraxis" / env
        cfg = (base / "pyvenv.cfg").read_text()
        assert "home = /usr/bin\n" in cfg and str(scratch_root) not in cfg
        for script in ("neuraxis", "ray"):
            shebang, *_ = (base / "bin" / script).read_text().splitlines()
            assert shebang == f"#!/opt/neuraxis/{env}/bin/python"
        assert "from neuraxis.cli import main" in (base / "bin/neuraxis").read_text()
        pyc = base / "lib/python3.11/site-packages/neuraxis/__pycache__/cli.cpython-311.pyc"
        data = pyc.read_bytes()
        # flags 0b01: hash-based, not checked against the source (PEP 552).
        assert int.from_bytes(data[4:8], "little") == 0b01
        assert f"/opt/neuraxis/{env}/lib".encode() in data and b"BUILDROOT" not in data


def test_the_engine_imports_from_the_installed_environment(
    scratch_root: Path, tmp_path: Path
) -> None:
    code = (
        "import sys, json, vllm, torch, neuraxis, neuron.engine.vllm.engine\n"
        "try:\n    import torchvision\n    tv = True\nexcept ImportError:\n    tv = False\n"
        "print(json.dumps({'prefix': sys.prefix, 'vllm': vllm.__file__,"
        " 'neuraxis': neuraxis.__file__, 'torch': torch.__version__, 'torchvision': tv}))"
    )
    cmd = as_installed(scratch_root, tmp_path, ["/opt/neuraxis/neuron/bin/python", "-c", code])
    result = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["prefix"] == "/opt/neuraxis/neuron"
    assert found["vllm"].startswith("/opt/neuraxis/neuron/lib/python3.11/site-packages/")
    assert found["neuraxis"].startswith("/opt/neuraxis/neuron/lib/python3.11/site-packages/")
    assert found["torch"] == "2.13.0+cpu"
    assert found["torchvision"] is False


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_installed_cortex_can_trace(scratch_root: Path, tmp_path: Path, protocol: str) -> None:
    """OpenTelemetry is in cortex's payload (the tracing extra): an endpoint
    set in cortex.toml is honoured, not an ImportError at start."""
    code = (
        "from axon import tracing\n"
        "settings = tracing.TraceSettings(otlp_endpoint='http://127.0.0.1:9', "
        f"otlp_protocol='{protocol}')\n"
        "assert tracing.configure('neuraxis-cortex', settings) and tracing.enabled()\n"
        "import opentelemetry.sdk.trace as sdk\nprint(sdk.__file__)\n"
    )
    cmd = as_installed(scratch_root, tmp_path, ["/opt/neuraxis/cortex/bin/python", "-c", code])
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("/opt/neuraxis/cortex/lib/python3.11/site-packages/")
