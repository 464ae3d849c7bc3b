"""The generated stubs in axon/v1 must match proto/axon/v1/neuron.proto:
regenerate them and compare. Run `make proto` to update them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GENERATED = ["neuron_pb2.py", "neuron_pb2.pyi", "neuron_pb2_grpc.py"]


def test_stubs_are_up_to_date(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{REPO / 'proto'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            str(REPO / "proto/axon/v1/neuron.proto"),
        ],
        check=True,
    )
    stale = [
        name
        for name in GENERATED
        if (tmp_path / "axon/v1" / name).read_bytes() != (REPO / "axon/v1" / name).read_bytes()
    ]
    assert not stale, f"out of date with neuron.proto: {stale}; run `make proto`"
