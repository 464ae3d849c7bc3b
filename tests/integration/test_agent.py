"""The GPU host agent (`neuraxis neuron agent`) as a real process, on the real
NVML path with a fake libnvidia-ml: it refuses a host of another generation,
and on a matching host it joins a real Ray head with its generation label
and GPU count, staying in the foreground until stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cortex.cluster.head import start_head, wait_for_head
from neuraxis.core.process import stop_process_group
from tests.fake_nvml import fake_nvml_env
from tests.procs import REPO, free_port

# The head, the agent and the test's driver share a token: the cluster does
# not depend on whatever ~/.ray/auth_token this machine holds.
TOKEN_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "neuraxis-agent-test-" + "0" * 44}
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
L40S = ("NVIDIA L40S", (8, 9))

_NODES = """
import json, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
print(json.dumps([{"alive": n["Alive"], "labels": n["Labels"], "gpus": n["Resources"].get("GPU", 0)}
                  for n in ray.nodes()]))
"""


def _agent(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "neuraxis.app.cli", "neuron", "agent", *args],
        env=env,
        cwd=REPO,
        start_new_session=True,
        **kwargs,
    )


def _nodes(address: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-c", _NODES, address],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, **TOKEN_ENV),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    nodes: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return nodes


def test_the_agent_refuses_a_host_of_another_generation() -> None:
    env = fake_nvml_env([A100, A100])
    agent = _agent(
        ["--generation", "ada", "--ray-address", f"127.0.0.1:{free_port()}"],
        env,
        stderr=subprocess.PIPE,
    )
    _, err = agent.communicate(timeout=60)
    assert agent.returncode == 78  # not retried by systemd (RestartPreventExitStatus)
    assert (
        "neuron agent: this neuron is installed for ada GPUs, but the host has ampere; "
        "install the neuraxis-neuron-ampere flavour"
    ) in err.decode()


def test_the_agent_joins_with_its_generation_label_and_gpus(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = dict(os.environ, **TOKEN_ENV)
    head = start_head(port, "127.0.0.1", env=env, log_path=tmp_path / "head.log")
    agent = None
    try:
        wait_for_head(address, head)
        # The child keeps its own copy of the descriptor; ours closes here.
        with open(tmp_path / "agent.log", "wb") as log:
            agent = _agent(
                ["--generation", "ada", "--ray-address", address],
                fake_nvml_env([L40S, L40S], base=env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        joined: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not joined:
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()[-3000:]
            joined = [
                n
                for n in _nodes(address)
                if n["alive"] and n["labels"].get("neuraxis.io/generation") == "ada"
            ]
            time.sleep(0.5)
        assert joined, (tmp_path / "agent.log").read_text()[-3000:]
        assert joined[0]["gpus"] == 2.0
        # SIGTERM (systemd's stop) takes the node out of the cluster.
        stop_process_group(agent, timeout_s=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ada = [n for n in _nodes(address) if n["labels"].get("neuraxis.io/generation") == "ada"]
            if ada and not any(n["alive"] for n in ada):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the agent's node is still alive after SIGTERM")
    finally:
        if agent is not None:
            stop_process_group(agent, timeout_s=10)
        stop_process_group(head, timeout_s=30)
