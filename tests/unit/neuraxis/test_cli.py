"""The `neuraxis` command line: the flags scripts, units and the controller
already pass keep their meaning now that the options are generated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from axon.generations import Generation
from axon.neuron_settings import AGENT_SETTINGS, NeuronSettings
from axon.settings import load_settings
from cortex.config import CortexSettings
from cortex.routing.factory import PolicyName
from neuraxis.cli import COMMANDS, build_parser, main
from neuraxis.embedded import EmbeddedOptions
from neuraxis.options import overrides

# Every flag `cortex`, `neuron serve` and `neuron agent` had before they were
# generated, with the overrides the hand-written parser passed on for it.
OLD_FLAGS: list[tuple[list[str], type[BaseSettings], dict[str, Any]]] = [
    (
        [
            "cortex",
            "--config=/etc/neuraxis/cortex.toml",
            "--host=0.0.0.0",
            "--port=8081",
            "--neuron=10.0.0.1:50051",
            "--neuron=10.0.0.2:50051",
            "--workers=4",
            "--state-dir=/var/lib/neuraxis",
            "--postgres-dsn=postgresql://u@db/neuraxis",
            "--no-metrics",
            "--model=smollm2-135m-instruct",
            "--model=all-minilm-l6-v2",
        ],
        CortexSettings,
        {
            "host": "0.0.0.0",
            "port": 8081,
            "neurons": ["10.0.0.1:50051", "10.0.0.2:50051"],
            "workers": 4,
            "store": {
                "state_dir": Path("/var/lib/neuraxis"),
                "postgres_dsn": "postgresql://u@db/neuraxis",
            },
            "metrics_enabled": False,
            "models": ["smollm2-135m-instruct", "all-minilm-l6-v2"],
        },
    ),
    (
        ["cortex", "--ray-head", "--ray-port=6390", "--deployment=/etc/neuraxis/deployment.toml"],
        CortexSettings,
        {
            "ray": {"head": True, "port": 6390},
            "controller": {"deployment": Path("/etc/neuraxis/deployment.toml")},
        },
    ),
    (
        ["cortex", "--ray-address=10.0.0.10:6379"],
        CortexSettings,
        {"ray": {"address": "10.0.0.10:6379"}},
    ),
    (
        [
            "neuron",
            "serve",
            "--host=127.0.0.2",
            "--port=50060",
            "--engine=sim",
            "--model=/models/m",
            "--served-id=m",
            "--task=embed",
            "--tool-parser=hermes",
            "--generation=ada",
            "--reasoning-parser=deepseek_r1",
            "--cache-dir=/var/lib/neuraxis/models",
            "--max-model-len=2048",
            "--dtype=bfloat16",
            "--quantization=fp8",
            "--kv-cache-dtype=fp8",
            "--tensor-parallel-size=2",
            "--kv-cache-gib=4",
            "--metrics-port=0",
            "--sim-ttft-s=0.5",
            "--sim-itl-s=0.25",
            "--sim-fail-after-tokens=3",
            "--sim-generation=blackwell",
        ],
        NeuronSettings,
        {
            "host": "127.0.0.2",
            "port": 50060,
            "engine": "sim",
            "model": "/models/m",
            "served_id": "m",
            "task": "embed",
            "tool_parser": "hermes",
            "generation": "ada",
            "reasoning_parser": "deepseek_r1",
            "cache_dir": Path("/var/lib/neuraxis/models"),
            "max_model_len": 2048,
            "dtype": "bfloat16",
            "quantization": "fp8",
            "kv_cache_dtype": "fp8",
            "tensor_parallel_size": 2,
            "kv_cache_gib": 4,
            "metrics_port": 0,
            "sim_ttft_s": 0.5,
            "sim_itl_s": 0.25,
            "sim_fail_after_tokens": 3,
            "sim_generation": "blackwell",
        },
    ),
    (
        [
            "neuron",
            "agent",
            "--config=/etc/neuraxis/neuron.toml",
            "--ray-address=10.0.0.10:6379",
            "--generation=ampere",
            "--node-ip=10.0.0.21",
        ],
        NeuronSettings,
        {"ray_address": "10.0.0.10:6379", "generation": "ampere", "node_ip": "10.0.0.21"},
    ),
]


@pytest.mark.parametrize(("argv", "cls", "expected"), OLD_FLAGS)
def test_the_old_flags_parse_to_the_same_settings(
    argv: list[str], cls: type[BaseSettings], expected: dict[str, Any]
) -> None:
    assert overrides(build_parser().parse_args(argv), cls) == expected


def test_no_flag_means_no_override() -> None:
    """`--ray-head` and `--no-metrics` were one-way switches: leaving them
    out must leave the TOML's value alone."""
    assert overrides(build_parser().parse_args(["cortex"]), CortexSettings) == {}
    assert overrides(build_parser().parse_args(["neuron", "serve"]), NeuronSettings) == {}


def test_the_agent_offers_the_settings_it_reads() -> None:
    args = build_parser().parse_args(["neuron", "agent"])
    offered = {name for name in NeuronSettings.model_fields if hasattr(args, name)}
    assert offered == set(AGENT_SETTINGS)


def test_a_flag_with_a_bad_value_names_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    """pydantic checks what argparse lets through (the port's range)."""
    assert main(["cortex", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuraxis: invalid configuration: port:")


def test_flags_override_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "neuron.toml"
    toml.write_text('generation = "ada"\nray_fixed_ports = true\nkv_cache_gib = 2\n')
    args = build_parser().parse_args(
        ["neuron", "serve", "--config", str(toml), "--kv-cache-gib=3", "--no-ray-fixed-ports"]
    )
    settings = load_settings(NeuronSettings, args.config, overrides(args, NeuronSettings))
    assert (settings.generation, settings.ray_fixed_ports, settings.kv_cache_gib) == (
        Generation.ADA,
        False,
        3,
    )


def _up(argv: list[str]) -> EmbeddedOptions:
    return EmbeddedOptions(**overrides(build_parser().parse_args(["up", *argv]), EmbeddedOptions))


def test_up_keeps_its_defaults() -> None:
    assert _up([]).model_dump() == {
        "host": "127.0.0.1",
        "auth": "off",
        "port": 8080,
        "admin_port": 9180,
        "neuron_port": 50051,
        "embedding_port": 50052,
        "neuron_metrics_port": 9400,
        "embedding_metrics_port": 9401,
        "cache_dir": None,
        "state_dir": None,
        "kv_cache_gib": 1,
        "replicas": 1,
        "routing": None,
        "max_model_len": None,
        "static": False,
        "ray_port": 0,
        "verbose": False,
        "log_format": "auto",
        "deployment": None,
        "engine": "vllm",
        "sim_ttft_s": 0.05,
        "sim_itl_s": 0.02,
        "otlp_endpoint": None,
        "otlp_protocol": "grpc",
        "trace_sample_ratio": 1.0,
    }


def test_up_keeps_its_flags() -> None:
    argv = [
        "--host=0.0.0.0",
        "--port=8090",
        "--admin-port=9190",
        "--neuron-port=50061",
        "--embedding-port=50062",
        "--neuron-metrics-port=9410",
        "--embedding-metrics-port=9411",
        "--cache-dir=/c",
        "--state-dir=/s",
        "--kv-cache-gib=2",
        "--routing=prefix_affinity",
        "--max-model-len=1024",
        "--static",
        "--ray-port=6390",
        "--verbose",
        "--log-format=json",
        "--otlp-endpoint=http://127.0.0.1:4318",
        "--otlp-protocol=http/protobuf",
        "--trace-sample-ratio=0.5",
    ]
    assert _up(argv).model_dump() == {
        "host": "0.0.0.0",
        "auth": "off",
        "port": 8090,
        "admin_port": 9190,
        "neuron_port": 50061,
        "embedding_port": 50062,
        "neuron_metrics_port": 9410,
        "embedding_metrics_port": 9411,
        "cache_dir": Path("/c"),
        "state_dir": Path("/s"),
        "kv_cache_gib": 2,
        "replicas": 1,
        "routing": PolicyName.PREFIX_AFFINITY,
        "max_model_len": 1024,
        "static": True,
        "ray_port": 6390,
        "verbose": True,
        "log_format": "json",
        "deployment": None,
        "engine": "vllm",
        "sim_ttft_s": 0.05,
        "sim_itl_s": 0.02,
        "otlp_endpoint": "http://127.0.0.1:4318",
        "otlp_protocol": "http/protobuf",
        "trace_sample_ratio": 0.5,
    }


@pytest.mark.parametrize("command", ["cordon", "drain", "uncordon"])
def test_node_commands_take_a_node_and_where_the_cluster_is(command: str) -> None:
    args = build_parser().parse_args(["node", command, "abc123", "--address", "10.0.0.1:6379"])
    assert (args.command, args.node_command, args.node) == ("node", command, "abc123")
    assert args.address == "10.0.0.1:6379"
    assert getattr(args, "timeout", None) == (900.0 if command == "drain" else None)


def test_a_node_command_with_no_cluster_to_reach_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # no `neuraxis up` here
    assert main(["node", "cordon", "abc123"]) == 2
    assert "give --address" in capsys.readouterr().err


def test_each_command_module_runs_its_own_command() -> None:
    """cli.py only registers: the parser a module adds runs that module."""
    parser = build_parser()
    argv = {"neuron": ["neuron", "serve"], "cluster": ["cluster", "stop", "--address", "a:1"]}
    argv |= {"config": ["config", "check"], "model": ["model", "prepare"]}
    argv |= {"tls": ["tls", "init", "d"], "keys": ["keys", "list"], "node": ["node", "drain", "n"]}
    argv |= {"tenants": ["tenants", "list"], "usage": ["usage"], "adapters": ["adapters", "list"]}
    for command in COMMANDS:
        name = command.__name__.rsplit(".", 1)[1]
        args = parser.parse_args(argv.get(name, [name]))
        assert (args.command, args.run) == (name, command.run)
