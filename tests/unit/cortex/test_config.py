"""cortex's routing settings: `routing` and its per-model overrides from the
flags, the environment and the TOML file, and the policy table they make."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex.config import CortexSettings
from cortex.routing.factory import PolicyName
from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.power_of_two import PowerOfTwo
from cortex.routing.prefix import PrefixHasher
from cortex.routing.prefix_affinity import PrefixAffinity
from neuraxis.app.cli import build_parser
from neuraxis.app.options import overrides
from neuraxis.core.settings import SettingsError, load_settings


def _from_flags(*argv: str) -> CortexSettings:
    args = build_parser().parse_args(["cortex", *argv])
    return load_settings(CortexSettings, None, overrides(args, CortexSettings))


def test_prefix_affinity_is_the_default_for_every_model() -> None:
    table = CortexSettings().routing.table()
    assert isinstance(table.for_model("any"), PrefixAffinity)


def test_routing_and_its_tuning_come_from_the_flags() -> None:
    settings = _from_flags(
        "--routing",
        "prefix_affinity",
        "--routing-models",
        '{"embedder": "power_of_two"}',
        "--routing-block-bytes",
        "128",
        "--routing-max-blocks",
        "8",
    )
    table = settings.routing.table()
    chat = table.for_model("chat")
    assert isinstance(chat, PrefixAffinity)
    assert chat.prefix_hasher == PrefixHasher(block_bytes=128, max_blocks=8)
    assert isinstance(table.for_model("embedder"), PowerOfTwo)


def test_routing_comes_from_the_environment_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text('routing = "power_of_two"\nrouting_models = { m = "prefix_affinity" }\n')
    from_file = load_settings(CortexSettings, config, {})
    assert isinstance(from_file.routing.table().for_model("x"), PowerOfTwo)
    assert isinstance(from_file.routing.table().for_model("m"), PrefixAffinity)
    monkeypatch.setenv("NEURAXIS_CORTEX_ROUTING", "least_outstanding")  # not the default
    assert isinstance(
        load_settings(CortexSettings, None, {}).routing.table().for_model("x"), LeastOutstanding
    )


def test_a_models_policy_routing_models_then_the_spec_then_routing() -> None:
    settings = CortexSettings(
        routing=PolicyName.POWER_OF_TWO, routing_models={"a": PolicyName.LEAST_OUTSTANDING}
    )
    spec = {"a": PolicyName.PREFIX_AFFINITY, "b": PolicyName.PREFIX_AFFINITY}
    table = settings.routing.table(spec)
    assert isinstance(table.for_model("a"), LeastOutstanding)
    assert isinstance(table.for_model("b"), PrefixAffinity)
    assert isinstance(table.for_model("c"), PowerOfTwo)


def test_an_unknown_policy_is_refused_with_the_setting_named() -> None:
    with pytest.raises((SettingsError, ValueError), match="routing"):
        load_settings(CortexSettings, None, {"routing_models": {"m": "sticky"}})


def test_rate_limit_counters_are_local_only_where_nothing_shares_them(tmp_path: Path) -> None:
    one = CortexSettings(state_dir=tmp_path)
    assert one.local_rate_limit_counters
    assert not CortexSettings(state_dir=tmp_path, workers=2).local_rate_limit_counters
    postgres = CortexSettings(state_dir=tmp_path, postgres_dsn="postgresql://x/y")
    assert not postgres.local_rate_limit_counters
    forced = CortexSettings(state_dir=tmp_path, rate_limit_counters="shared")
    assert not forced.local_rate_limit_counters
