"""The status types' JSON: the exact bytes `neuraxis status --json` prints
and the report a cortex sends the controller, pinned, so that a change in
how the types are written cannot change what scripts and older peers read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from axon.generations import Generation
from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.status import (
    ClusterStatus,
    CortexReport,
    CortexStatus,
    ModelStatus,
    NodeStatus,
    ReplicaState,
    ReplicaStatus,
    waiting_reason,
)
from neuraxis.status import render_json
from tests.unit.status_fixtures import ADA, CHAT, CORTEX, FAILOVER, NODE, STARTING, full_status

# Every field set at least once, and left to its default at least once.
FULL = full_status(
    nodes=[
        NODE,
        NodeStatus(node_id="node-2", host="10.0.0.22", generation=None, gpus=0, alive=False),
    ],
    models=[
        CHAT.model_copy(
            update={
                "generations": [ADA, Generation.BLACKWELL],
                "replicas": [STARTING, ReplicaStatus(id="chat-4", state=ReplicaState.PENDING)],
            }
        ),
        ModelStatus(id="embed", desired=1, generations=[], gpus_per_replica=0),
    ],
    failovers=[FAILOVER.model_copy(update={"address": None})],
    cortices=[CORTEX.model_copy(update={"head_up": None})],
)

EMPTY_JSON = """{
  "adopted": 0,
  "cortices": [],
  "epoch": null,
  "failovers": [],
  "models": [],
  "nodes": [],
  "passes": 0,
  "version": 0
}
"""

REPORT = CortexReport(
    instance="gw-1:4711",
    host="gw-1",
    pid=4711,
    in_flight={"10.0.0.21:50051": 2, "10.0.0.22:50051": 0},
    table_version=7,
    head_up=True,
    table_age_s=1.5,
    controller_restarts=1,
    adopted=2,
)
REPORT_JSON = (
    '{"adopted": 2, "caps": {}, "controller_restarts": 1, "head_up": true, "host": "gw-1", '
    '"in_flight": {"10.0.0.21:50051": 2, "10.0.0.22:50051": 0}, "instance": "gw-1:4711", '
    '"kv_usage": {}, "pid": 4711, "queued": {}, "table_age_s": 1.5, "table_version": 7}'
)


def test_status_json_is_byte_for_byte_what_it_was() -> None:
    pinned = (Path(__file__).parent / "status_full.json").read_text()
    assert render_json(FULL) == pinned
    assert render_json(ClusterStatus()) == EMPTY_JSON


def test_a_cortex_report_crosses_the_wire_as_it_did() -> None:
    assert json.dumps(REPORT.model_dump(mode="json"), sort_keys=True) == REPORT_JSON
    assert CortexReport.read(json.loads(REPORT_JSON)) == REPORT


def test_a_long_pending_replica_says_what_it_waits_for() -> None:
    pending = ReplicaRecord("m-1", "m", 1, 100.0, state=ReplicaState.PENDING)
    assert waiting_reason(pending, 2, 105.0) is None
    assert waiting_reason(pending, 2, 111.0) == "waiting for a node with 2 free GPUs"
    assert waiting_reason(pending, 0, 111.0) == "waiting for the cluster"
    ready = ReplicaRecord("m-2", "m", 2, 100.0, state=ReplicaState.READY)
    assert waiting_reason(ready, 2, 111.0) is None


def test_reading_the_wire_refuses_a_missing_or_unknown_field_but_code_may_omit_defaults() -> None:
    data = json.loads(render_json(FULL))
    del data["cortices"][0]["head_up"]  # a field with a default
    with pytest.raises(TypeError, match="missing fields: head_up"):
        ClusterStatus.read(data)
    assert (
        CortexStatus(
            instance="i", host="h", pid=1, in_flight=0, table_version=0, reported_s_ago=0.0
        ).head_up
        is None
    )
