"""Plaintext gRPC between cortex and the neurons: the `plaintext` setting
(refused beside the TLS files), and the warning each side logs at every
start without TLS unless its gRPC stays on loopback."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest
from pydantic import ValidationError

from axon.neuron_settings import AGENT_SETTINGS, NeuronSettings
from axon.tls import NEURON_PLAINTEXT_ENV, is_loopback, plaintext_warning
from cortex import main as cortex_main
from cortex.config import CortexSettings
from harness.polling import wait_until
from harness.ports import free_port
from harness.procs import Proc
from neuron.agent import replica_tls_env

TLS = {"tls_ca": "ca.crt", "tls_cert": "c.crt", "tls_key": "c.key"}


@pytest.mark.parametrize("settings_class", [CortexSettings, NeuronSettings])
def test_plaintext_beside_the_tls_files_is_refused(
    settings_class: type[CortexSettings] | type[NeuronSettings],
) -> None:
    with pytest.raises(ValidationError, match="plaintext = true and mutual TLS"):
        settings_class.model_validate({"plaintext": True, **TLS})
    assert settings_class(plaintext=True).tls is None
    assert settings_class.model_validate(TLS).tls is not None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.21", False),
        ("gpu1.internal", False),
        ("", False),  # unknown (Ray's guess of the node's address)
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_warning_is_due_unless_every_host_is_loopback() -> None:
    assert plaintext_warning("cortex", "the link", False, ["127.0.0.1", "localhost"]) is None
    assert plaintext_warning("cortex", "the link", True, ["::1"]) is None
    chosen = plaintext_warning("cortex", "the link", True, ["127.0.0.1", "10.0.0.21"])
    assert chosen is not None
    assert chosen.startswith("cortex: the link is plaintext gRPC (plaintext = true)")
    assert "neuraxis tls init" in chosen
    unset = plaintext_warning("neuron", "the listener", False, ["0.0.0.0"])
    assert unset is not None
    assert unset.startswith("neuron: refusing plaintext gRPC on the listener: no tls_ca")
    assert "or set plaintext = true (--plaintext)" in unset


def test_cortex_checks_the_hosts_its_grpc_goes_to() -> None:
    static = CortexSettings(neurons=["127.0.0.1:50051", "10.0.0.21:50051", "[::1]:50052"])
    assert static.neuron_hosts == ["127.0.0.1", "10.0.0.21", "[::1]"]
    joined = CortexSettings.model_validate(
        {"ray": {"address": "10.0.0.10:6379"}, "controller": {"deployment": "d.toml"}}
    )
    assert joined.neuron_hosts == ["10.0.0.10"]
    head = CortexSettings.model_validate(
        {"ray": {"head": True, "node_ip": "127.0.0.1"}, "controller": {"deployment": "d.toml"}}
    )
    assert head.neuron_hosts == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("settings", "status", "expected"),
    [
        ({"neurons": ["10.0.0.21:50051"]}, 2, "refusing plaintext gRPC on the link to the neurons"),
        ({"neurons": ["10.0.0.21:50051"], "plaintext": True}, 0, "is plaintext gRPC"),
        ({"neurons": ["127.0.0.1:50051"]}, 0, None),
        ({"neurons": ["127.0.0.1:50051"], "plaintext": True}, 0, None),
        ({"neurons": ["10.0.0.21:50051"], **TLS}, 0, None),
    ],
)
def test_cortex_without_tls_off_loopback_needs_plaintext_and_warns(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    settings: dict[str, object],
    status: int,
    expected: str | None,
) -> None:
    monkeypatch.setattr(cortex_main, "configure_logging", lambda *args: "text")
    monkeypatch.setattr(cortex_main, "_serve", lambda settings: 0)
    with caplog.at_level(logging.WARNING, logger="neuraxis.cortex"):
        assert cortex_main.run(CortexSettings.model_validate(settings)) == status
    said = [r for r in caplog.records if "plaintext gRPC" in r.getMessage()]
    if expected is None:
        assert said == []
    else:
        assert len(said) == 1 and expected in said[0].getMessage(), said
        assert said[0].getMessage().startswith("cortex: ")
        assert said[0].levelno == (logging.ERROR if status else logging.WARNING)


@pytest.mark.parametrize(
    ("host", "extra", "expected"),
    [
        ("0.0.0.0", ["--plaintext"], "neuron: the listener on 0.0.0.0:{port} is plaintext gRPC"),
        ("127.0.0.1", ["--plaintext"], None),
        ("127.0.0.1", [], None),
    ],
)
def test_a_neuron_warns_at_start(
    tmp_path: Path, host: str, extra: list[str], expected: str | None
) -> None:
    # The sim engine's start holds the neuron a minute after the warning's
    # place (the log says "loading"), so the warning is there or never.
    port = free_port()
    args = ["neuron", "serve", "--engine", "sim", "--host", host, "--port", str(port)]
    proc = Proc([*args, "--sim-load-s", "120", *extra], tmp_path / "neuron.log")
    try:
        assert wait_until(lambda: "sim engine: loading" in proc.log_tail(), 30), proc.log_tail()
        lines = [line for line in proc.log_tail().splitlines() if "plaintext gRPC" in line]
        if expected is None:
            assert lines == []
        else:
            assert len(lines) == 1 and expected.format(port=port) in lines[0], lines
    finally:
        proc.stop(signal.SIGKILL, timeout=5)


def test_a_neuron_off_loopback_without_tls_or_plaintext_refuses_to_start(tmp_path: Path) -> None:
    port = free_port()
    args = ["neuron", "serve", "--engine", "sim", "--host", "0.0.0.0", "--port", str(port)]
    proc = Proc(args, tmp_path / "neuron.log")
    try:
        assert proc.popen.wait(timeout=60) == 2, proc.log_tail()
        assert "neuron: refusing plaintext gRPC on the listener on 0.0.0.0" in proc.log_tail()
    finally:
        proc.stop(signal.SIGKILL, timeout=5)


def test_the_agent_hands_its_plaintext_setting_to_its_replicas() -> None:
    assert "plaintext" in AGENT_SETTINGS
    assert replica_tls_env(NeuronSettings(plaintext=True)) == {NEURON_PLAINTEXT_ENV: "true"}
    assert replica_tls_env(NeuronSettings()) == {}
    assert NEURON_PLAINTEXT_ENV not in replica_tls_env(NeuronSettings.model_validate(TLS))
