from __future__ import annotations

import io
import json
from typing import Any

import pytest
from pydantic import BaseModel

from axon.generations import Generation
from cortex.cluster.status import (
    ClusterStatus,
    ModelStatus,
    NodeStatus,
    ReplicaState,
    ReplicaStatus,
)
from neuraxis.status import render, render_json, watch
from tests.unit.status_fixtures import full_status

ADA = Generation.ADA

STATUS = ClusterStatus(
    nodes=[
        NodeStatus(node_id="a" * 40, host="10.0.0.21", generation=ADA, gpus=2, alive=True),
        NodeStatus(node_id="b" * 40, host="10.0.0.22", generation=None, gpus=0, alive=False),
        NodeStatus(
            node_id="c" * 40, host="10.0.0.23", generation=ADA, gpus=2, alive=True, mark="draining"
        ),
    ],
    models=[
        ModelStatus(
            id="chat",
            desired=2,
            generations=[ADA, Generation.BLACKWELL],
            gpus_per_replica=1,
            replicas=[
                ReplicaStatus(
                    id="chat-1",
                    state=ReplicaState.READY,
                    address="10.0.0.21:4000",
                    generation=ADA,
                    in_flight=3,
                    engine_running=2,
                    engine_waiting=1,
                    load_age_s=0.4,
                    cortex_in_flight=4,
                ),
                ReplicaStatus(
                    id="chat-2", state=ReplicaState.PENDING, waiting="waiting for 1 free GPU"
                ),
            ],
        ),
        ModelStatus(
            id="big",
            desired=1,
            generations=[Generation.HOPPER],
            gpus_per_replica=8,
            unplaceable="no node of generation hopper in the cluster",
        ),
    ],
    version=4,
)

# Every field set (none None, no list empty), so that a field the JSON loses
# or renames cannot hide behind its default.
FULL = full_status()

# The JSON `neuraxis status --json` prints for FULL, written out by hand:
# what scripts reading it depend on.
FULL_JSON: dict[str, Any] = {
    "nodes": [
        {
            "node_id": "node-1",
            "host": "10.0.0.21",
            "generation": "ada",
            "gpus": 2,
            "alive": True,
            "mark": "cordoned",
        }
    ],
    "models": [
        {
            "id": "chat",
            "desired": 2,
            "generations": ["ada"],
            "gpus_per_replica": 1,
            "unplaceable": "no node of generation ada in the cluster",
            "last_start_error": "the neuron exited with code 1 during start-up: boom",
            "replicas": [
                {
                    "id": "chat-3",
                    "state": "starting",
                    "waiting": "waiting for a node with 1 free GPUs",
                    "address": "10.0.0.21:50051",
                    "host": "10.0.0.21",
                    "node_id": "node-1",
                    "generation": "ada",
                    "in_flight": 5,
                    "pid": 4242,
                    "log": "/var/lib/neuraxis/replicas/chat-3.log",
                    "engine_running": 4,
                    "engine_waiting": 1,
                    "load_age_s": 1.5,
                    "cortex_in_flight": 6,
                    "created_at": 1800000000.0,
                    "placed_at": 1800000001.25,
                    "ready_at": 1800000090.5,
                }
            ],
            "autoscale": {
                "min_replicas": 1,
                "max_replicas": 4,
                "direction": "up",
                "reason": "load",
                "detail": "35 in flight + 0 queued, target 10 per replica: 4 wanted for 10 s",
                "decided_s_ago": 12.5,
            },
            "adapters": ["support", "legal"],
        }
    ],
    "failovers": [
        {
            "model": "chat",
            "replica": "chat-1",
            "reason": "its actor is gone (RayActorError)",
            "failed_at": 1800000000.5,
            "address": "10.0.0.22:50051",
            "replacement": "chat-3",
            "replacement_address": "10.0.0.21:50051",
            "ready_at": 1800000003.0,
            "seconds_to_ready": 2.5,
        }
    ],
    "version": 7,
    "passes": 12,
    "cortices": [
        {
            "instance": "gw-1:4711",
            "host": "gw-1",
            "pid": 4711,
            "in_flight": 6,
            "table_version": 7,
            "reported_s_ago": 0.8,
            "head_up": False,
            "table_age_s": 42.5,
            "controller_restarts": 2,
            "adopted": 3,
        }
    ],
    "epoch": "0123456789abcdef",
    "adopted": 1,
}


def _unset_fields(value: object, path: str = "status") -> list[str]:
    """The paths of fields that are None or empty lists, anywhere inside."""
    if isinstance(value, BaseModel):
        found = []
        for name in type(value).model_fields:
            found += _unset_fields(getattr(value, name), f"{path}.{name}")
        return found
    if isinstance(value, list):
        if not value:
            return [path]
        return [p for i, item in enumerate(value) for p in _unset_fields(item, f"{path}[{i}]")]
    return [path] if value is None else []


def test_tables_show_nodes_replicas_and_unplaceable_models() -> None:
    lines = render(STATUS).splitlines()
    assert "  10.0.0.21  ada         2     alive            aaaaaaaaaaaa" in lines
    assert "  10.0.0.22  -           0     dead             bbbbbbbbbbbb" in lines
    assert "  10.0.0.23  ada         2     alive, draining  cccccccccccc" in lines
    assert any(line.split()[:3] == ["chat", "1/2", "ada,blackwell"] for line in lines)
    ready = next(line for line in lines if "chat-1" in line).split()
    # cortex's count, then the engine's running and waiting with their age.
    assert ready == ["chat", "chat-1", "ready", "10.0.0.21:4000", "ada", "4", "2", "1", "0.4s"]
    assert "pending (waiting for 1 free GPU)" in next(line for line in lines if "chat-2" in line)
    assert lines[lines.index("UNPLACEABLE") + 2].split(None, 1) == [
        "big",
        "no node of generation hopper in the cluster",
    ]


def test_models_show_their_adapters_by_id_when_few_else_their_count() -> None:
    lines = render(FULL).splitlines()
    assert lines[lines.index("MODELS") + 1].split()[-1] == "ADAPTERS"
    assert lines[lines.index("MODELS") + 2].split() == ["chat", "0/2", "ada", "1", "support,legal"]
    many = FULL.models[0].model_copy(update={"adapters": ["a", "b", "c", "d"]})
    lines = render(FULL.model_copy(update={"models": [many]})).splitlines()
    assert lines[lines.index("MODELS") + 2].split()[-1] == "4"
    # A model without adapters (and STATUS's, whose models have none).
    assert (
        next(ln for ln in render(STATUS).splitlines() if ln.startswith("  big")).split()[-1] == "-"
    )


def test_a_start_error_shows_while_the_model_is_short_of_replicas() -> None:
    lines = render(FULL).splitlines()
    # An unplaceable reason comes first; without one, the start error.
    assert "no node of generation ada" in lines[lines.index("UNPLACEABLE") + 2]
    model = FULL.models[0].model_copy(update={"unplaceable": None})
    lines = render(FULL.model_copy(update={"models": [model]})).splitlines()
    assert lines[lines.index("UNPLACEABLE") + 2].split(None, 1) == [
        "chat",
        "failed to start: the neuron exited with code 1 during start-up: boom",
    ]


def test_autoscaled_models_show_ready_desired_and_the_last_decision() -> None:
    lines = render(FULL).splitlines()
    row = lines[lines.index("AUTOSCALING") + 2]
    assert row.split()[:3] == ["chat", "0/2", "1-4"]
    assert "up (load) 12s ago" in row
    assert row.endswith("35 in flight + 0 queued, target 10 per replica: 4 wanted for 10 s")
    assert "AUTOSCALING" not in render(STATUS)  # no table: no section


def test_the_fixture_sets_every_field() -> None:
    assert _unset_fields(FULL) == []


def test_json_has_every_field_under_its_name() -> None:
    assert json.loads(render_json(FULL)) == FULL_JSON


def test_json_reads_back_as_the_same_status() -> None:
    assert ClusterStatus.read(json.loads(render_json(FULL))) == FULL
    assert ClusterStatus.read(json.loads(render_json(STATUS))) == STATUS


def test_the_cortex_table_lists_each_reporting_instance() -> None:
    lines = render(FULL).splitlines()
    assert lines[lines.index("CORTEX") + 2].split() == ["gw-1:4711", "6", "7", "0.8s", "ago"]
    lines = render(STATUS).splitlines()
    assert lines[lines.index("CORTEX") + 2 :] == ["  (none)"]


class _Screen(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize("tty", [True, False])
def test_watch_fetches_and_prints_a_fresh_status_each_round(tty: bool) -> None:
    counts = iter([1, 2, 3])
    slept: list[float] = []

    def fetch() -> ClusterStatus:
        replica = STATUS.models[0].replicas[0].model_copy(update={"cortex_in_flight": next(counts)})
        model = STATUS.models[0].model_copy(update={"replicas": [replica]})
        return STATUS.model_copy(update={"models": [model]})

    screen = _Screen(tty)
    watch(fetch, screen, 1.5, sleep=slept.append, now=lambda: 0.0, rounds=3)
    text = screen.getvalue()
    rounds = text.split("neuraxis status, every 1.5s")[1:]
    assert len(rounds) == 3
    shown = [next(ln for ln in r.splitlines() if "chat-1" in ln).split()[5] for r in rounds]
    assert shown == ["1", "2", "3"]
    assert slept == [1.5, 1.5]  # between rounds, not after the last
    assert (text.count("\x1b[2J") == 3) is tty


@pytest.mark.parametrize(
    "where", ["status", "nodes", "models", "replicas", "failovers", "cortices"]
)
def test_reading_json_refuses_a_missing_or_unknown_field(where: str) -> None:
    data = json.loads(render_json(FULL))
    item = {
        "status": data,
        "nodes": data["nodes"][0],
        "models": data["models"][0],
        "replicas": data["models"][0]["replicas"][0],
        "failovers": data["failovers"][0],
        "cortices": data["cortices"][0],
    }[where]
    item["surprise"] = 1
    with pytest.raises(TypeError):
        ClusterStatus.read(data)
    del item["surprise"]
    del item[next(iter(item))]
    with pytest.raises(TypeError):
        ClusterStatus.read(data)


def test_the_control_plane_shows_the_controller_and_what_each_cortex_sees() -> None:
    lines = render(FULL).splitlines()
    assert lines[lines.index("CONTROLLER") + 2].split() == ["01234567", "7", "1"]
    row = lines[lines.index("CONTROL PLANE (as each cortex sees it)") + 2].split()
    assert row == ["gw-1:4711", "DOWN", "42.5s", "2", "3"]
    up = FULL.cortices[0].model_copy(update={"head_up": True, "table_age_s": None})
    lines = render(FULL.model_copy(update={"cortices": [up]})).splitlines()
    row = lines[lines.index("CONTROL PLANE (as each cortex sees it)") + 2].split()
    assert row[1:3] == ["up", "-"]
