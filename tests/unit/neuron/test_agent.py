from __future__ import annotations

from pathlib import Path

import pytest

from axon.generations import GENERATION_LABEL, Generation
from axon.neuron_settings import NeuronSettings
from axon.tls import TlsError, TlsFiles
from neuron import agent
from neuron.agent import join_command, replica_tls_env
from neuron.gpu import Device


def test_the_node_joins_with_its_generation_label_and_gpu_count() -> None:
    devices = [Device(i, "NVIDIA L40S", 48 * 1024**3, (8, 9), Generation.ADA) for i in range(4)]
    cmd = join_command("/opt/neuraxis/bin/ray", "10.0.0.10:6379", Generation.ADA, devices, None)
    assert cmd[:5] == ["/opt/neuraxis/bin/ray", "start", "--address", "10.0.0.10:6379", "--block"]
    assert cmd[cmd.index("--labels") + 1] == f"{GENERATION_LABEL}=ada"
    assert cmd[cmd.index("--num-gpus") + 1] == "4"
    assert "--node-ip-address" not in cmd
    with_ip = join_command("ray", "h:1", Generation.CPU, [], "10.0.0.21")
    assert with_ip[with_ip.index("--node-ip-address") + 1] == "10.0.0.21"
    assert with_ip[with_ip.index("--num-gpus") + 1] == "0"


def test_firewalled_hosts_use_the_fixed_ray_ports() -> None:
    cmd = join_command("ray", "h:6379", Generation.ADA, [], None, fixed_ports=True)
    assert cmd[cmd.index("--node-manager-port") + 1] == "6380"
    assert cmd[cmd.index("--min-worker-port") + 1] == "10002"
    assert cmd[cmd.index("--max-worker-port") + 1] == "10999"
    assert "--node-manager-port" not in join_command("ray", "h:1", Generation.ADA, [], None)


def test_the_replicas_get_the_hosts_tls_files_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert replica_tls_env(NeuronSettings()) == {}
    settings = NeuronSettings(
        tls_ca=tmp_path / "ca.crt", tls_cert=Path("tls/neuron.crt"), tls_key=tmp_path / "n.key"
    )
    env = replica_tls_env(settings)
    assert env == {
        "NEURAXIS_NEURON_TLS_CA": str(tmp_path / "ca.crt"),
        "NEURAXIS_NEURON_TLS_CERT": str(Path.cwd() / "tls" / "neuron.crt"),
        "NEURAXIS_NEURON_TLS_KEY": str(tmp_path / "n.key"),
    }
    # What a replica's neuron, started with that environment, reads.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert NeuronSettings().tls == TlsFiles(
        tmp_path / "ca.crt", Path.cwd() / "tls" / "neuron.crt", tmp_path / "n.key"
    )


def test_the_agent_stops_at_once_without_its_tls_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The packaged neuron.toml names /etc/neuraxis/tls: a host whose files
    # were not copied yet is refused at start (a settings error: exit 2),
    # before it joins and each replica fails on its own.
    monkeypatch.setattr(agent, "configure_logging", lambda *args: "text")
    monkeypatch.setattr(agent, "load_nvml", lambda: pytest.fail("went on past the TLS files"))
    settings = NeuronSettings(
        ray_address="10.0.0.10:6379",
        tls_ca=tmp_path / "ca.crt",
        tls_cert=tmp_path / "neuron.crt",
        tls_key=tmp_path / "neuron.key",
    )
    with pytest.raises(TlsError, match=r"tls_ca: cannot read .*ca\.crt"):
        agent.run_agent(settings)


def test_the_node_starts_without_rays_log_monitor() -> None:
    # Every driver joins with log_to_driver=False: nobody reads what it forwards.
    assert "--include-log-monitor=false" in join_command("ray", "h:1", Generation.ADA, [], None)
