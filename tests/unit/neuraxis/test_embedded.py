"""`neuraxis up`'s deployment and the options it hands its cortex: the
number of chat replicas and the routing policy."""

from __future__ import annotations

import pytest

from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL, NeuronSettings
from cortex.cluster.spec import parse_spec
from cortex.config import CortexSettings
from neuraxis.cli import build_parser, main
from neuraxis.embedded import (
    EmbeddedOptions,
    cortex_command,
    cortex_options,
    embedded_spec,
    tracing_env,
)
from neuraxis.options import overrides


def _up(*argv: str) -> EmbeddedOptions:
    args = build_parser().parse_args(["up", *argv])
    return EmbeddedOptions(**overrides(args, EmbeddedOptions))


def test_replicas_sets_the_chat_models_replicas_and_only_its() -> None:
    spec = parse_spec(embedded_spec(_up("--replicas", "3", "--kv-cache-gib", "2")), "up")
    chat, embedding = spec.model(DEFAULT_CHAT_MODEL), spec.model(DEFAULT_EMBEDDING_MODEL)
    assert chat is not None and embedding is not None
    assert (chat.replicas, chat.engine.kv_cache_gib) == (3, 2)
    assert (embedding.replicas, embedding.engine.kv_cache_gib) == (1, 1)
    # The policy goes to cortex, not into the spec.
    assert spec.routing() == {}


def test_one_chat_replica_by_default() -> None:
    spec = parse_spec(embedded_spec(_up()), "up")
    assert [m.replicas for m in spec.models] == [1, 1]


def test_routing_is_passed_to_cortex_when_given() -> None:
    admin = ["--admin-port", "9180"]
    assert cortex_options(_up("--routing", "power_of_two")) == [*admin, "--routing", "power_of_two"]
    assert cortex_options(_up()) == admin
    with_state = cortex_options(_up("--state-dir", "/s", "--routing", "prefix_affinity"))
    assert with_state == [*admin, "--state-dir", "/s", "--routing", "prefix_affinity"]


def test_the_admin_port_is_passed_to_cortex() -> None:
    assert cortex_options(_up("--admin-port", "9999"))[:2] == ["--admin-port", "9999"]


def test_several_replicas_with_static_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--static", "--replicas", "2"]) == 2
    assert "--replicas above 1 needs Ray" in capsys.readouterr().err


def test_cortex_is_started_with_the_same_command_line_in_either_mode() -> None:
    """The supervisor starts a cortex that died again with this line: the
    same address, ports and auth, and where its neurons are."""
    options = _up("--port", "8090", "--auth", "required", "--admin-port", "9190")
    assert cortex_command(options, "--ray-address", "127.0.0.1:6390") == [
        *("cortex", "--host", "127.0.0.1", "--port", "8090", "--plaintext"),
        *("--auth", "required"),
        *("--ray-address", "127.0.0.1:6390", "--admin-port", "9190"),
    ]


def test_otlp_endpoint_traces_cortex_and_every_neuron_through_their_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert tracing_env(EmbeddedOptions()) == {}
    options = EmbeddedOptions(otlp_endpoint="http://127.0.0.1:4317", trace_sample_ratio=0.01)
    for name, value in tracing_env(options).items():
        monkeypatch.setenv(name, value)
    for settings in (CortexSettings(), NeuronSettings()):
        assert (settings.otlp_endpoint, settings.otlp_protocol, settings.trace_sample_ratio) == (
            "http://127.0.0.1:4317",
            "grpc",
            0.01,
        )
