"""Every spelling of a cortex setting that scripts, units and config files
used before the settings were grouped by component (round 3) still sets the
same value: its flag, its NEURAXIS_CORTEX_* name and its flat TOML key.

SPELLINGS was generated from `CortexSettings.model_fields` as it was before
the grouping (each field's name and its `Flag`) and is kept here as data, so
that a rename in the code cannot quietly rename the old spelling too. WHERE
says where each one lives now."""

from __future__ import annotations

import argparse
import json
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from axon.settings import load_settings
from cortex.config import CortexSettings
from neuraxis.options import add_settings_options, overrides

# (field, flag without the dashes, a value other than the default). Fields
# that only validate together are given together (a row per field, the
# companions in COMPANIONS).
SPELLINGS: list[tuple[str, str, Any]] = [
    ("log_format", "log-format", "json"),
    ("log_level", "log-level", "debug"),
    ("json_logs", "json-logs", True),
    ("host", "host", "0.0.0.0"),
    ("port", "port", 8081),
    ("admin_host", "admin-host", "127.0.0.2"),
    ("admin_port", "admin-port", 9181),
    ("neurons", "neuron", ["a:1", "b:2"]),
    ("models", "model", ["m1", "m2"]),
    ("request_timeout_s", "request-timeout-s", 601.0),
    ("first_token_timeout_s", "first-token-timeout-s", 121.0),
    ("idle_timeout_s", "idle-timeout-s", 61.0),
    ("health_timeout_s", "health-timeout-s", 1.5),
    ("eject_consecutive_failures", "eject-consecutive-failures", 6),
    ("eject_base_s", "eject-base-s", 31.0),
    ("eject_max_s", "eject-max-s", 301.0),
    ("retry_budget_ratio", "retry-budget-ratio", 0.3),
    ("retry_budget_min", "retry-budget-min", 4),
    ("poll_interval_s", "poll-interval-s", 1.5),
    ("max_retries", "max-retries", 3),
    ("routing", "routing", "power_of_two"),
    ("routing_models", "routing-models", {"m": "least_outstanding"}),
    ("routing_epsilon", "routing-epsilon", 0.6),
    ("routing_block_bytes", "routing-block-bytes", 512),
    ("routing_max_blocks", "routing-max-blocks", 33),
    ("load_interval_s", "load-interval-s", 0.6),
    ("load_max_age_s", "load-max-age-s", 2.5),
    ("routing_kv_limit", "routing-kv-limit", 0.9),
    ("replica_max_concurrency", "replica-max-concurrency", 7),
    ("admission_queue_size", "admission-queue-size", 257),
    ("admission_queue_timeout_s", "admission-queue-timeout-s", 31.0),
    ("max_messages", "max-messages", 2049),
    ("max_tools", "max-tools", 129),
    ("max_stop_sequences", "max-stop-sequences", 5),
    ("max_schema_bytes", "max-schema-bytes", 65537),
    ("max_completion_prompts", "max-completion-prompts", 129),
    ("max_prompts_times_n", "max-prompts-times-n", 257),
    ("max_embedding_inputs", "max-embedding-inputs", 2049),
    ("max_embedding_input_bytes", "max-embedding-input-bytes", 8388609),
    ("max_background_per_tenant", "max-background-per-tenant", 17),
    ("max_body_bytes", "max-body-bytes", 1000),
    ("request_header_timeout_s", "request-header-timeout-s", 11.0),
    ("request_body_timeout_s", "request-body-timeout-s", 61.0),
    ("max_header_count", "max-header-count", 101),
    ("max_header_bytes", "max-header-bytes", 16385),
    ("metrics_enabled", "metrics", False),
    ("workers", "workers", 2),
    ("shutdown_grace_s", "shutdown-grace-s", 31.0),
    ("state_dir", "state-dir", Path("/tmp/nx-state")),
    ("postgres_dsn", "postgres-dsn", "postgresql://h/db"),
    ("responses_ttl_days", "responses-ttl-days", 31.0),
    ("responses_purge_interval_s", "responses-purge-interval-s", 3601.0),
    ("responses_lease_s", "responses-lease-s", 31.0),
    ("auth", "auth", "required"),
    ("allow_unauthenticated", "allow-unauthenticated", True),
    ("rate_limit_counters", "rate-limit-counters", "shared"),
    ("auth_cache_s", "auth-cache-s", 3.0),
    ("ray_address", "ray-address", "10.0.0.1:6379"),
    ("ray_head", "ray-head", True),
    ("ray_port", "ray-port", 6380),
    ("ray_node_ip", "ray-node-ip", "10.0.0.2"),
    ("ray_fixed_ports", "ray-fixed-ports", True),
    ("deployment", "deployment", Path("/etc/neuraxis/deployment.toml")),
    ("health_interval_s", "health-interval-s", 3.0),
    ("replica_start_timeout_s", "replica-start-timeout-s", 901.0),
    ("tls_ca", "tls-ca", Path("/pki/ca.pem")),
    ("tls_cert", "tls-cert", Path("/pki/cortex.pem")),
    ("tls_key", "tls-key", Path("/pki/cortex.key")),
]

# Settings that are only valid with others (cluster mode needs a spec; TLS
# is all three files or none), given in the same spelling.
COMPANIONS: dict[str, list[str]] = {
    "ray_address": ["deployment"],
    "ray_head": ["deployment"],
    "tls_ca": ["tls_cert", "tls_key"],
    "tls_cert": ["tls_ca", "tls_key"],
    "tls_key": ["tls_ca", "tls_cert"],
}

# Where an old spelling's value lives now (a dotted path on CortexSettings);
# a field not named here kept its place.
WHERE: dict[str, str] = {
    "admin_host": "admin.host",
    "admin_port": "admin.port",
    "request_timeout_s": "deadlines.total_s",
    "first_token_timeout_s": "deadlines.first_token_s",
    "idle_timeout_s": "deadlines.idle_s",
    "health_timeout_s": "pool.health_timeout_s",
    "eject_consecutive_failures": "ejection.consecutive_failures",
    "eject_base_s": "ejection.base_s",
    "eject_max_s": "ejection.max_s",
    "retry_budget_ratio": "retry_budget.ratio",
    "retry_budget_min": "retry_budget.minimum",
    "poll_interval_s": "pool.poll_interval_s",
    "max_retries": "pool.max_retries",
    "routing": "routing.policy",
    "routing_models": "routing.models",
    "routing_epsilon": "routing.epsilon",
    "routing_block_bytes": "routing.block_bytes",
    "routing_max_blocks": "routing.max_blocks",
    "load_interval_s": "pool.load_interval_s",
    "load_max_age_s": "routing.load_max_age_s",
    "routing_kv_limit": "routing.kv_limit",
    "replica_max_concurrency": "admission.replica_max_concurrency",
    "admission_queue_size": "admission.queue_size",
    "admission_queue_timeout_s": "admission.queue_timeout_s",
    "max_messages": "caps.max_messages",
    "max_tools": "caps.max_tools",
    "max_stop_sequences": "caps.max_stop_sequences",
    "max_schema_bytes": "caps.max_schema_bytes",
    "max_completion_prompts": "caps.max_completion_prompts",
    "max_prompts_times_n": "caps.max_prompts_times_n",
    "max_embedding_inputs": "caps.max_embedding_inputs",
    "max_embedding_input_bytes": "caps.max_embedding_input_bytes",
    "max_background_per_tenant": "caps.max_background_per_tenant",
    "max_body_bytes": "http.max_body_bytes",
    "request_header_timeout_s": "http.header_timeout_s",
    "request_body_timeout_s": "http.body_timeout_s",
    "max_header_count": "http.max_header_count",
    "max_header_bytes": "http.max_header_bytes",
    "state_dir": "store.state_dir",
    "postgres_dsn": "store.postgres_dsn",
    "responses_ttl_days": "responses.ttl_days",
    "responses_purge_interval_s": "responses.purge_interval_s",
    "responses_lease_s": "responses.lease_s",
    "auth": "auth.mode",
    "allow_unauthenticated": "auth.allow_unauthenticated",
    "rate_limit_counters": "auth.rate_limit_counters",
    "auth_cache_s": "auth.cache_s",
    "ray_address": "ray.address",
    "ray_head": "ray.head",
    "ray_port": "ray.port",
    "ray_node_ip": "ray.node_ip",
    "ray_fixed_ports": "ray.fixed_ports",
    "deployment": "controller.deployment",
    "health_interval_s": "controller.health_interval_s",
    "replica_start_timeout_s": "controller.replica_start_timeout_s",
}

VALUES = {field: value for field, _, value in SPELLINGS}
FLAGS = {field: flag for field, flag, _ in SPELLINGS}


def _read(settings: CortexSettings, field: str) -> Any:
    value: Any = settings
    for part in WHERE.get(field, field).split("."):
        value = getattr(value, part)
    return value.value if isinstance(value, Enum) else value


def _given(field: str) -> list[str]:
    return [field, *COMPANIONS.get(field, [])]


def _argv(field: str) -> list[str]:
    flag, value = FLAGS[field], VALUES[field]
    if isinstance(value, bool):
        return [f"--{flag}" if value else f"--no-{flag}"]
    if isinstance(value, list):
        return [f"--{flag}={item}" for item in value]
    if isinstance(value, dict):
        return [f"--{flag}={json.dumps(value)}"]
    return [f"--{flag}={value}"]


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def _cortex_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_settings_options(parser, CortexSettings)
    return parser


PARSER = _cortex_parser()  # parsing leaves it as it was: one for every test


def _from_flags(argv: list[str]) -> CortexSettings:
    return load_settings(CortexSettings, None, overrides(PARSER.parse_args(argv), CortexSettings))


def test_the_list_is_every_setting_that_existed() -> None:
    assert len(SPELLINGS) == 68
    assert len(set(VALUES)) == len(SPELLINGS)


@pytest.mark.parametrize("field", list(VALUES))
def test_the_old_flag_sets_it(field: str) -> None:
    settings = _from_flags([arg for name in _given(field) for arg in _argv(name)])
    assert _read(settings, field) == VALUES[field]


@pytest.mark.parametrize("field", list(VALUES))
def test_the_old_environment_name_sets_it(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _given(field):
        monkeypatch.setenv(f"NEURAXIS_CORTEX_{name.upper()}", _env_text(VALUES[name]))
    assert _read(load_settings(CortexSettings, None, {}), field) == VALUES[field]


@pytest.mark.parametrize("field", list(VALUES))
def test_the_old_flat_toml_key_sets_it(field: str, tmp_path: Path) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text("".join(f"{name} = {_toml(VALUES[name])}\n" for name in _given(field)))
    assert _read(load_settings(CortexSettings, config, {}), field) == VALUES[field]


@pytest.mark.parametrize("field", ["admission_queue_size", "routing", "max_tools", "port"])
def test_flags_beat_the_environment_which_beats_the_file(
    field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = _read(CortexSettings(), field)
    config = tmp_path / "cortex.toml"
    config.write_text(f"{field} = {_toml(VALUES[field])}\n")
    assert _read(load_settings(CortexSettings, config, {}), field) == VALUES[field]
    other = {"routing": "least_outstanding"}.get(field, default)
    monkeypatch.setenv(f"NEURAXIS_CORTEX_{field.upper()}", _env_text(other))
    assert _read(load_settings(CortexSettings, config, {}), field) == other
    flag_value = {"routing": "prefix_affinity"}.get(field, VALUES[field])
    argv = [f"--{FLAGS[field]}={flag_value}"]
    given = overrides(PARSER.parse_args(argv), CortexSettings)
    assert _read(load_settings(CortexSettings, config, given), field) == flag_value


@pytest.mark.parametrize("field", list(WHERE))
def test_the_table_spellings_set_it_too(
    field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each moved setting by its new names: `--group-name`,
    NEURAXIS_CORTEX_<GROUP>__<NAME> and `name` in the file's [group]."""
    given = _given(field)
    argv = [
        arg.replace(f"--{FLAGS[name]}", f"--{WHERE[name].replace('.', '-').replace('_', '-')}")
        if name in WHERE
        else arg
        for name in given
        for arg in _argv(name)
    ]
    assert _read(_from_flags(argv), field) == VALUES[field]
    with monkeypatch.context() as env:
        for name in given:
            new = WHERE.get(name, name).replace(".", "__").upper()
            env.setenv(f"NEURAXIS_CORTEX_{new}", _env_text(VALUES[name]))
        assert _read(load_settings(CortexSettings, None, {}), field) == VALUES[field]
    config = tmp_path / "cortex.toml"
    tables = [WHERE.get(name, name).partition(".") for name in given]
    config.write_text(
        "".join(
            f"[{group}]\n{key} = {_toml(VALUES[name])}\n"
            for name, (group, _, key) in zip(given, tables, strict=True)
            if key
        )
    )
    assert _read(load_settings(CortexSettings, config, {}), field) == VALUES[field]
