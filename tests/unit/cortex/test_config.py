"""cortex's settings: the groups (TOML tables, NEURAXIS_CORTEX_<GROUP>__<NAME>,
--group-name), the routing settings and the policy table they make. Every
spelling from before the groups: test_config_spellings.py."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from axon.settings import SettingsError, group_of, load_settings
from cortex.api.caps import RequestCaps
from cortex.api.responses.upkeep_settings import UpkeepSettings
from cortex.auth.settings import AuthSettings
from cortex.config import AUTO_WORKERS_CAP, CortexSettings, StoreSettings
from cortex.routing.admission import AdmissionOptions
from cortex.routing.deadlines import Deadlines
from cortex.routing.factory import PolicyName, RoutingSettings
from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.power_of_two import PowerOfTwo
from cortex.routing.prefix import PrefixHasher
from cortex.routing.prefix_affinity import PrefixAffinity
from neuraxis.cli import build_parser
from neuraxis.options import add_settings_options, overrides


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
    routing = RoutingSettings(
        policy=PolicyName.POWER_OF_TWO, models={"a": PolicyName.LEAST_OUTSTANDING}
    )
    spec = {"a": PolicyName.PREFIX_AFFINITY, "b": PolicyName.PREFIX_AFFINITY}
    table = routing.table(spec)
    assert isinstance(table.for_model("a"), LeastOutstanding)
    assert isinstance(table.for_model("b"), PrefixAffinity)
    assert isinstance(table.for_model("c"), PowerOfTwo)


def test_an_unknown_policy_is_refused_with_the_setting_named() -> None:
    with pytest.raises((SettingsError, ValueError), match="routing"):
        load_settings(CortexSettings, None, {"routing_models": {"m": "sticky"}})


def test_rate_limit_counters_are_local_only_where_nothing_shares_them(tmp_path: Path) -> None:
    store = StoreSettings(state_dir=tmp_path)
    one = CortexSettings(store=store)
    assert one.local_rate_limit_counters
    assert not CortexSettings(store=store, workers=2).local_rate_limit_counters
    postgres = StoreSettings(state_dir=tmp_path, postgres_dsn="postgresql://x/y")
    assert not CortexSettings(store=postgres).local_rate_limit_counters
    forced = CortexSettings(store=store, auth=AuthSettings(rate_limit_counters="shared"))
    assert not forced.local_rate_limit_counters


def test_each_group_is_its_components_own_options(tmp_path: Path) -> None:
    """What the components take is the settings' group itself, with the
    defaults written once, in the component's module."""
    settings = CortexSettings(store=StoreSettings(state_dir=tmp_path))
    assert settings.caps == RequestCaps()
    assert settings.deadlines == Deadlines()
    assert settings.admission == AdmissionOptions()
    assert settings.responses == UpkeepSettings()
    assert settings.routing.table().options is settings.routing


def test_the_tables_the_new_environment_names_and_the_new_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text("[admission]\nqueue_size = 10\nqueue_timeout_s = 5\n[caps]\nmax_tools = 8\n")
    monkeypatch.setenv("NEURAXIS_CORTEX_ADMISSION__QUEUE_SIZE", "11")
    monkeypatch.setenv("NEURAXIS_CORTEX_CAPS", '{"max_messages": 9}')
    settings = load_settings(CortexSettings, config, {})
    assert (settings.admission.queue_size, settings.admission.queue_timeout_s) == (11, 5.0)
    assert (settings.caps.max_tools, settings.caps.max_messages) == (8, 9)
    flags = build_parser().parse_args(["cortex", "--admission-queue-size=12"])
    from_flags = load_settings(CortexSettings, config, overrides(flags, CortexSettings))
    assert from_flags.admission.queue_size == 12


def test_the_new_spelling_wins_over_the_old_in_one_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text("max_tools = 4\n[caps]\nmax_tools = 3\n")
    assert load_settings(CortexSettings, config, {}).caps.max_tools == 3
    monkeypatch.setenv("NEURAXIS_CORTEX_MAX_TOOLS", "5")
    monkeypatch.setenv("NEURAXIS_CORTEX_CAPS__MAX_TOOLS", "6")
    assert load_settings(CortexSettings, None, {}).caps.max_tools == 6
    # An old name in the environment beats a table in the file.
    config.write_text("[caps]\nmax_tools = 7\n")
    monkeypatch.delenv("NEURAXIS_CORTEX_CAPS__MAX_TOOLS")
    assert load_settings(CortexSettings, config, {}).caps.max_tools == 5


def test_docs_configuration_lists_every_setting() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    for name, field in CortexSettings.model_fields.items():
        group = group_of(field)
        if group is None:
            assert f"| `{name}` |" in text.split("\n## [")[0], name
            continue
        (table,) = [part for part in text.split("\n## [") if part.startswith(f"{name}]")]
        missing = [sub for sub in group.model_fields if f"| `{sub}` |" not in table]
        assert missing == [], name


def test_workers_auto_is_one_per_core_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert CortexSettings(workers="auto").worker_count == 2
    assert not CortexSettings(workers="auto").local_rate_limit_counters
    monkeypatch.setattr(os, "cpu_count", lambda: 96)
    assert CortexSettings(workers="auto").worker_count == AUTO_WORKERS_CAP
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert CortexSettings(workers="auto").worker_count == 1
    assert CortexSettings(workers=3).worker_count == 3
    with pytest.raises(ValueError, match="workers"):
        CortexSettings(workers="many")
    with pytest.raises(ValueError, match="workers"):
        CortexSettings(workers=0)


def test_workers_auto_from_a_flag_the_environment_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    add_settings_options(parser, CortexSettings)
    given = overrides(parser.parse_args(["--workers", "auto"]), CortexSettings)
    assert load_settings(CortexSettings, None, given).workers == "auto"
    given = overrides(parser.parse_args(["--workers", "4"]), CortexSettings)
    assert given == {"workers": 4}
    with pytest.raises(SystemExit):
        parser.parse_args(["--workers", "many"])
    config = tmp_path / "cortex.toml"
    config.write_text('workers = "auto"\n')
    assert load_settings(CortexSettings, config, {}).workers == "auto"
    monkeypatch.setenv("NEURAXIS_CORTEX_WORKERS", "5")
    assert load_settings(CortexSettings, config, {}).workers == 5
