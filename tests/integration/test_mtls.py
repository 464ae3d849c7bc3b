"""Mutual TLS between real processes: a simulated neuron with the cluster's
files from `neuraxis tls init`, a cortex with the right ones serving through
it, a cortex with another cluster's files answering 503 instead of hanging,
and the neuron refusing plaintext, certificate-less and foreign clients."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from axon.tls import NEURON_SERVER_NAME
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from harness.ports import free_port
from harness.procs import Proc, wait_http_ready
from harness.sim_specs import pinned_replica_spec
from neuraxis.cli import main

pytestmark = pytest.mark.integration

MODEL = "sim-tls"
HELLO = [{"role": "user", "content": "Hello"}]


@dataclass(frozen=True)
class Cluster:
    """The TLS files `neuraxis tls init` wrote for one cluster."""

    directory: Path

    def flags(self, stem: str) -> list[str]:
        d = self.directory
        return [
            "--tls-ca",
            f"{d}/ca.crt",
            "--tls-cert",
            f"{d}/{stem}.crt",
            "--tls-key",
            f"{d}/{stem}.key",
        ]

    def read(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()


@dataclass(frozen=True)
class Running:
    neuron: str  # gRPC address
    ours: Cluster
    other: Cluster
    logs: Path


def _tls_init(directory: Path) -> Cluster:
    # The command's own `main`, in this process: the files are what the
    # processes under test read, and a process start took 2-10 s here.
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main(["tls", "init", str(directory)]) == 0
    return Cluster(directory)


def _info(address: str, credentials: grpc.ChannelCredentials | None) -> pb.InfoResponse:
    """One Info call, over TLS (checking the neuron's name) or plaintext."""
    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        options = [("grpc.ssl_target_name_override", NEURON_SERVER_NAME)]
        channel = grpc.secure_channel(address, credentials, options=options)
    with channel:
        stub = pb_grpc.NeuronStub(channel)  # type: ignore[no-untyped-call]
        info: pb.InfoResponse = stub.Info(pb.InfoRequest(), timeout=10)
        return info


def _credentials(
    ca: Cluster, cert: Cluster | None, stem: str = "cortex"
) -> grpc.ChannelCredentials:
    """A client trusting `ca`'s CA and showing `cert`'s certificate (None: none)."""
    if cert is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.read("ca.crt"))
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read("ca.crt"),
        private_key=cert.read(f"{stem}.key"),
        certificate_chain=cert.read(f"{stem}.crt"),
    )


def _wait_ready(proc: Proc, address: str, credentials: grpc.ChannelCredentials) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"the neuron exited:\n{proc.log_tail()}")
        try:
            if _info(address, credentials).ready:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the neuron was not ready after 60 s:\n{proc.log_tail()}")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("mtls")
    ours, other = _tls_init(root / "ours"), _tls_init(root / "other")
    port = free_port()
    args = ["neuron", "serve", "--engine", "sim", "--served-id", MODEL, "--port", str(port)]
    args += ["--metrics-port", str(free_port()), *ours.flags("neuron")]
    neuron = Proc(args, root / "neuron.log")
    try:
        address = f"127.0.0.1:{port}"
        _wait_ready(neuron, address, _credentials(ours, ours))
        yield Running(address, ours, other, root)
    finally:
        neuron.stop()


def _cortex(running: Running, cluster: Cluster, name: str) -> tuple[Proc, str]:
    port = free_port()
    args = ["cortex", "--port", str(port), "--neuron", running.neuron, "--model", MODEL]
    args += ["--poll-interval-s", "0.5", *cluster.flags("cortex")]
    proc = Proc(args, running.logs / f"{name}.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http_ready(proc, f"{base}/healthz", 60)
    except BaseException:
        proc.stop()
        raise
    return proc, base


def _chat(base: str) -> httpx.Response:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 4}
    # A bounded wait: a cortex that cannot reach the neuron must say so, not hang.
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)


def test_cortex_with_the_clusters_certificates_serves_a_chat(running: Running) -> None:
    proc, base = _cortex(running, running.ours, "cortex-ours")
    try:
        wait_http_ready(proc, f"{base}/readyz", 30)
        r = _chat(base)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
    finally:
        proc.stop()


def test_cortex_with_another_clusters_certificates_reports_the_neuron_not_ready(
    running: Running,
) -> None:
    proc, base = _cortex(running, running.other, "cortex-other")
    try:
        r = _chat(base)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "service_unavailable"
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 503
    finally:
        proc.stop()


def test_a_client_with_the_clusters_certificate_is_let_in(running: Running) -> None:
    # The control for the refusals below: same address, same calls.
    assert _info(running.neuron, _credentials(running.ours, running.ours)).ready


def test_a_plaintext_client_is_refused(running: Running) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _info(running.neuron, None)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_without_a_certificate_is_refused(running: Running) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _info(running.neuron, _credentials(running.ours, None))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_with_a_certificate_of_another_ca_is_refused(running: Running) -> None:
    # It trusts the neuron; the neuron does not trust it.
    with pytest.raises(grpc.RpcError) as info:
        _info(running.neuron, _credentials(running.ours, running.other))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_neuron_with_half_its_tls_settings_does_not_start(running: Running) -> None:
    d = running.ours.directory
    args = ["neuron", "serve", "--engine", "sim", "--port", str(free_port())]
    args += ["--metrics-port", "0", "--tls-ca", f"{d}/ca.crt", "--tls-cert", f"{d}/neuron.crt"]
    proc = Proc(args, running.logs / "neuron-half.log")
    try:
        assert proc.popen.wait(timeout=60) == 2
        assert "tls_key unset" in proc.log_tail()
    finally:
        proc.stop()


def test_a_cluster_over_mutual_tls(
    running: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cluster mode: the Ray nodes carry the neurons' files as the host agent
    hands them on (NEURAXIS_NEURON_TLS_*), cortex its own; the replicas come
    up ready through the replica's, the controller's and the pool's checks,
    serve a chat through cortex, and refuse a plaintext client."""
    from harness.sim_cluster import sim_cluster

    d = running.ours.directory
    for side, stem in (("NEURON", "neuron"), ("CORTEX", "cortex")):
        monkeypatch.setenv(f"NEURAXIS_{side}_TLS_CA", str(d / "ca.crt"))
        monkeypatch.setenv(f"NEURAXIS_{side}_TLS_CERT", str(d / f"{stem}.crt"))
        monkeypatch.setenv(f"NEURAXIS_{side}_TLS_KEY", str(d / f"{stem}.key"))
    spec = pinned_replica_spec("sim-tls-cluster", "ada")
    with sim_cluster(
        spec, tmp_path, ("ada",), wait_for_model="sim-tls-cluster", plaintext=False
    ) as cluster:
        (replica,) = cluster.wait_ready("sim-tls-cluster", 1)
        # The controller's checks go over TLS too: only a Load call it could
        # make sets the replica's in-flight count.
        deadline = time.monotonic() + 30
        while cluster.ready("sim-tls-cluster")[0]["in_flight"] is None:
            assert time.monotonic() < deadline, cluster.model("sim-tls-cluster")
            time.sleep(0.2)
        body = {"model": "sim-tls-cluster", "messages": HELLO, "max_tokens": 4}
        r = httpx.post(f"{cluster.base_url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        with pytest.raises(grpc.RpcError) as info:
            _info(replica["address"], None)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert _info(replica["address"], _credentials(running.ours, running.ours)).ready
