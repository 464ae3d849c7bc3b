"""The controller actor's constructor, called as Ray calls it (no Ray needed:
the shell only builds its controller)."""

from __future__ import annotations

from cortex.cluster.controller import ControllerConfig
from cortex.cluster.ray_backend import ControllerShell


def test_the_shell_runs_its_controller_with_the_config_it_is_given() -> None:
    config = ControllerConfig(health_interval_s=1.0, start_timeout_s=5.0)
    assert ControllerShell(config=config, spec=None)._controller._config == config


def test_a_controller_an_earlier_cortex_started_comes_back_with_its_arguments() -> None:
    # What Ray passes when it restarts a controller created before the config
    # travelled whole: its fields as keywords.
    shell = ControllerShell(health_interval_s=1.0, start_timeout_s=5.0, tls=None, spec=None)
    assert shell._controller._config == ControllerConfig(health_interval_s=1.0, start_timeout_s=5.0)
