"""Running a Ray head as a child process (cortex's host, and `neuraxis up`).

`ray start --head --block` stays in the foreground and stops every Ray
process it started when it gets SIGTERM, so the head is supervised like any
other child: its own process group, the parent's death signal, and
axon.process.stop_process_group to stop it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import grpc

from axon.process import (
    FIXED_RAY_PORT_ARGS,
    QUIET_HEAD_ARGS,
    die_with_parent,
    ray_binary,
    ray_start_env,
)

# Ray's object store holds only small control messages here.
OBJECT_STORE_BYTES = 100 * 1024 * 1024


def head_command(
    port: int,
    node_ip: str,
    labels: dict[str, str] | None = None,
    num_cpus: int = 1,
    fixed_ports: bool = False,
) -> list[str]:
    cmd = [
        ray_binary(),
        "start",
        "--head",
        "--block",
        "--port",
        str(port),
        "--node-ip-address",
        node_ip,
        "--include-dashboard=false",
        *QUIET_HEAD_ARGS,
        "--num-cpus",
        str(num_cpus),
        "--num-gpus",
        "0",
        "--object-store-memory",
        str(OBJECT_STORE_BYTES),
    ]
    if fixed_ports:
        cmd += FIXED_RAY_PORT_ARGS
    if labels:
        cmd += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
    return cmd


def start_head(
    port: int,
    node_ip: str,
    labels: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    fixed_ports: bool = False,
) -> subprocess.Popen[bytes]:
    out = open(log_path, "ab") if log_path else None  # noqa: SIM115 (the child owns it)
    try:
        return subprocess.Popen(
            head_command(port, node_ip, labels, fixed_ports=fixed_ports),
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            env=ray_start_env(env),
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    finally:
        if out:
            out.close()


def wait_for_head(
    address: str, child: subprocess.Popen[bytes] | None, timeout_s: float = 60.0
) -> None:
    """Wait until the head's GCS accepts connections."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child is not None and child.poll() is not None:
            raise RuntimeError(f"the Ray head exited with code {child.returncode}")
        channel = grpc.insecure_channel(address)
        try:
            grpc.channel_ready_future(channel).result(timeout=1.0)
            return
        except grpc.FutureTimeoutError:
            pass
        finally:
            channel.close()
        time.sleep(0.3)
    raise RuntimeError(f"the Ray head at {address} did not start in {timeout_s:.0f} s")
