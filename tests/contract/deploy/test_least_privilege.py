"""The packaged units, users and directories agree, checked on deploy/ as
it is (tests/rpm checks the installed files and runs them): each service's
user and groups are declared in sysusers.d, every directory it may write is
made by tmpfiles.d for that user, cortex's user is not the neurons', and the
neuron unit has limits like the others."""

from __future__ import annotations

import shlex
import tomllib
from collections import defaultdict

import pytest

from harness.procs import REPO
from harness.units import unit_file_settings

DEPLOY = REPO / "deploy"
UNITS = ("neuraxis-cortex.service", "neuraxis-head.service", "neuraxis-neuron.service")


def unit(name: str) -> dict[str, list[str]]:
    return unit_file_settings(DEPLOY / "systemd" / name)


def declared(folder: str) -> list[list[str]]:
    """The lines of every file in deploy/<folder>, split into fields."""
    lines = []
    for path in sorted((DEPLOY / folder).glob("*.conf")):
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                lines.append(shlex.split(line))
    return lines


def users_and_groups() -> tuple[set[str], dict[str, set[str]]]:
    users, members = set(), defaultdict(set)
    for kind, name, *rest in declared("sysusers.d"):
        if kind == "u":
            users.add(name)
            members[name].add(name)  # a u line makes the user's own group
        elif kind == "m":
            members[rest[0]].add(name)
    return users, members


@pytest.mark.parametrize("name", UNITS)
def test_each_units_user_and_groups_are_declared(name: str) -> None:
    users, members = users_and_groups()
    s = unit(name)
    (user,) = s["User"]
    assert user in users
    groups = " ".join(s["Group"] + s["SupplementaryGroups"]).split()
    for group in groups:
        assert user in members[group], (user, group)


@pytest.mark.parametrize("name", UNITS)
def test_what_a_unit_writes_is_made_for_its_user(name: str) -> None:
    made = {fields[1]: fields[3] for fields in declared("tmpfiles.d") if fields[0] == "d"}
    s = unit(name)
    for path in " ".join(s["ReadWritePaths"]).split():
        assert made.get(path) == s["User"][0], path
    home = dict(v.split("=", 1) for v in " ".join(s["Environment"]).split() if "=" in v)["HOME"]
    assert made.get(home) == s["User"][0]


def test_cortex_runs_apart_from_the_neurons() -> None:
    cortex, head, neuron = (unit(name) for name in UNITS)
    assert cortex["User"] == head["User"] == ["neuraxis-cortex"]
    assert neuron["User"] == ["neuraxis"]
    assert cortex["JoinsNamespaceOf"] == ["neuraxis-head.service"]


@pytest.mark.parametrize("name", UNITS)
def test_every_unit_has_task_and_memory_limits(name: str) -> None:
    s = unit(name)
    assert int(s["TasksMax"][0]) >= 1024
    assert s["MemoryHigh"] and s["MemoryMax"]


def test_the_packaged_store_is_where_cortex_may_write() -> None:
    settings = tomllib.loads((DEPLOY / "etc/neuraxis/cortex.toml").read_text())
    writable = " ".join(unit("neuraxis-cortex.service")["ReadWritePaths"]).split()
    assert settings["store"]["state_dir"] in writable
