"""The GPU host agent (`neuraxis neuron agent`) as a real process, on the real
NVML path with a fake libnvidia-ml: it refuses a host of another generation,
and on a matching host it joins a real Ray head with its generation label
and GPU count, staying in the foreground until stopped. Under a notify
socket (systemd's `Type=notify`) it sends READY=1 once its node has joined."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from axon.process import stop_process_group
from cortex.cluster.head import start_head, wait_for_head
from harness.fake_nvml import fake_nvml_env
from harness.notify import NotifySocket
from harness.ports import free_port
from harness.procs import REPO

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
        [sys.executable, "-m", "neuraxis.cli", "neuron", "agent", *args],
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


def test_the_agent_joins_with_its_label_and_gpus_says_ready_and_leaves_on_sigterm(
    tmp_path: Path,
) -> None:
    """The unit's ExecStart (`neuraxis neuron agent`) under a notify socket:
    READY=1 arrives, and by then the node is alive in the cluster with its
    generation label and GPU count; SIGTERM (systemd's stop) ends the agent
    with status 0 and takes the node out of the cluster."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = dict(os.environ, **TOKEN_ENV)
    head = start_head(port, "127.0.0.1", env=env, log_path=tmp_path / "head.log")
    notify = NotifySocket(tmp_path / "agent.notify")
    agent = None
    log_path = tmp_path / "agent.log"
    try:
        wait_for_head(address, head)
        # The child keeps its own copy of the descriptor; ours closes here.
        with open(log_path, "wb") as log:
            agent = _agent(
                ["--generation", "ada", "--ray-address", address, "--plaintext"],
                fake_nvml_env([L40S, L40S], base={**env, "NOTIFY_SOCKET": str(notify.path)}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        running = agent

        seconds = notify.wait_for(
            "READY=1", lambda: running.poll() is None, 90, lambda: log_path.read_text()[-3000:]
        )
        print(f"agent READY after {seconds:.1f} s")
        # Nothing is sent before the node is there: it is alive now.
        ada = [n for n in _nodes(address) if n["labels"].get("neuraxis.io/generation") == "ada"]
        assert [(n["alive"], n["gpus"]) for n in ada] == [(True, 2.0)], ada
        assert any(m.startswith("STATUS=joined the Ray cluster at") for m in notify.messages)
        agent.send_signal(signal.SIGTERM)  # systemd's stop (KillMode=mixed)
        assert agent.wait(timeout=90) == 0, log_path.read_text()[-3000:]
        notify.wait_for("STOPPING=1", lambda: True, 5, lambda: log_path.read_text()[-3000:])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ada = [n for n in _nodes(address) if n["labels"].get("neuraxis.io/generation") == "ada"]
            if ada and not any(n["alive"] for n in ada):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the agent's node is still alive after SIGTERM")
    finally:
        notify.close()
        if agent is not None:
            stop_process_group(agent, timeout_s=10)
        stop_process_group(head, timeout_s=30)
