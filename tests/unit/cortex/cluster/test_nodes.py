"""Node operations through the controller (fake backend, hand-moved clock):
cordon keeps new replicas off a node, drain moves its replicas elsewhere
first and never lowers a model's ready count where capacity exists,
uncordon clears it, and the marks outlive the controller."""

from __future__ import annotations

import pytest

from axon.generations import Generation
from cortex.cluster.controller import Controller, ControllerConfig
from cortex.cluster.nodes import NodeError, NodeMark, resolve
from harness.clock import ManualClock, settle
from tests.unit.cortex.cluster.fakes import node
from tests.unit.cortex.cluster.test_controller import chat, model, spec, started, table, tick

ADA = node("n-ada-0123456789", Generation.ADA, gpus=2)
BLACKWELL = node("n-bw-0123456789", Generation.BLACKWELL, gpus=2)


def _nodes_of(controller: Controller) -> list[str | None]:
    return [r.node_id for r in model(controller).replicas]


def test_a_node_is_named_by_id_prefix_or_host() -> None:
    nodes = [ADA, BLACKWELL]
    assert resolve(nodes, ADA.node_id) is ADA
    assert resolve(nodes, "n-bw-0123") is BLACKWELL
    assert resolve(nodes, BLACKWELL.host) is BLACKWELL
    with pytest.raises(NodeError, match="no node 'elsewhere'"):
        resolve(nodes, "elsewhere")
    twin = node("n-ada-twin-00000", Generation.ADA)  # the same host (fakes.node)
    with pytest.raises(NodeError, match="several nodes"):
        resolve([ADA, twin], ADA.host)


async def test_a_cordoned_node_gets_no_new_replica_and_keeps_its_own() -> None:
    controller, backend, _ = await started([ADA, BLACKWELL], spec(chat(1)))
    assert _nodes_of(controller) == [ADA.node_id]
    await controller.mark_node("n-ada-0123", NodeMark.CORDONED)
    await settle()
    assert _nodes_of(controller) == [ADA.node_id]  # still serving there
    assert table(controller) == ["chat-1"]
    await controller.apply(spec(chat(3)), start_loop=False)
    await settle()
    # Both new ones on the schedulable node, pinned there.
    assert _nodes_of(controller) == [ADA.node_id, BLACKWELL.node_id, BLACKWELL.node_id]
    assert [r.pinned for r in backend.created[1:]] == [True, True]
    status = {n.node_id: n.mark for n in controller.status().nodes}
    assert status == {ADA.node_id: "cordoned", BLACKWELL.node_id: None}


async def test_drain_starts_the_replacement_first_then_stops_the_replica() -> None:
    controller, backend, clock = await started([ADA, BLACKWELL], spec(chat(1)))
    backend.start_s = 5.0  # the replacement takes a while to load
    await controller.mark_node(ADA.node_id, NodeMark.DRAINING)
    await settle()
    # The replacement is placed on the other node; the old one still serves.
    assert backend.created[-1].preferred_node == BLACKWELL.node_id
    assert table(controller) == ["chat-1"]
    for _ in range(4):
        await tick(controller, clock)
        assert table(controller) == ["chat-1"], "the ready count dropped"
    await tick(controller, clock, 2.0)  # the replacement is ready
    assert "chat-2" in table(controller)
    await tick(controller, clock)  # the old one drains (out of the table first)
    await tick(controller, clock)
    assert backend.drained == ["chat-1"]
    assert table(controller) == ["chat-2"]
    assert _nodes_of(controller) == [BLACKWELL.node_id]


async def test_drain_without_room_elsewhere_keeps_the_replica_and_says_why() -> None:
    controller, backend, clock = await started([ADA], spec(chat(1)))
    await controller.mark_node("n-ada-0123", NodeMark.DRAINING)
    await tick(controller, clock)
    assert table(controller) == ["chat-1"]
    assert backend.drained == []
    assert model(controller).unplaceable == (
        "every node that could hold it is cordoned or draining"
    )
    await controller.mark_node("n-ada-0123", None)  # uncordon
    await tick(controller, clock)
    assert model(controller).unplaceable is None
    assert table(controller) == ["chat-1"]


async def test_the_marks_outlive_the_controller() -> None:
    controller, backend, _ = await started([ADA, BLACKWELL], spec(chat(1)))
    await controller.mark_node(BLACKWELL.host, NodeMark.CORDONED)
    assert backend.marks == {BLACKWELL.node_id: NodeMark.CORDONED}
    successor = Controller(backend, ManualClock(0.0), ControllerConfig(health_interval_s=1.0))
    await successor.apply(spec(chat(1)), start_loop=False)
    marks = {n.node_id: n.mark for n in successor.status().nodes}
    assert marks[BLACKWELL.node_id] == "cordoned"
    await successor.mark_node(BLACKWELL.host, None)
    assert backend.marks == {}


async def test_an_unknown_node_is_an_error_and_changes_nothing() -> None:
    controller, backend, _ = await started([ADA, BLACKWELL], spec(chat(1)))
    with pytest.raises(NodeError):
        await controller.mark_node("nowhere", NodeMark.DRAINING)
    assert backend.marks == {}
