"""A replica's own life as the controller drives it: its start's times in
the status, and a stop that comes while it is still starting."""

from __future__ import annotations

import pytest

from cortex.cluster.controller import Controller, ControllerConfig
from cortex.cluster.status import ReplicaState
from harness.clock import ManualClock, settle
from tests.unit.cortex.cluster.fakes import FakeBackend
from tests.unit.cortex.cluster.test_controller import ADA, chat, model, spec, tick


async def test_a_replica_stopped_while_starting_has_its_neuron_stopped_first() -> None:
    """Killing the actor alone SIGKILLs the neuron, and an engine core that
    neuron had spawned outlived it: the stop goes to the neuron first."""
    clock = ManualClock(0.0)
    backend = FakeBackend([ADA], clock)
    backend.start_s = 60.0
    controller = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await controller.apply(spec(chat()), start_loop=False)
    await settle()
    assert [r.state for r in model(controller).replicas] == [ReplicaState.STARTING]
    await controller.shutdown()
    assert backend.drained == ["chat-1"] and backend.killed == ["chat-1"]
    assert backend.started == []


async def test_a_replicas_status_says_when_it_was_created_placed_and_ready() -> None:
    clock = ManualClock(0.0)
    backend = FakeBackend([ADA], clock)
    backend.start_s = 40.0  # its neuron loads for 40 s
    controller = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await controller.apply(spec(chat()), start_loop=False)
    await settle()
    [starting] = model(controller).replicas
    assert starting.created_at is not None and starting.placed_at is not None
    assert starting.ready_at is None
    await tick(controller, clock, 40.0)
    [ready] = model(controller).replicas
    assert ready.state is ReplicaState.READY
    created, placed, serving = ready.created_at, ready.placed_at, ready.ready_at
    assert created is not None and placed is not None and serving is not None
    assert serving - placed == pytest.approx(40.0, abs=1.0)
    assert created <= placed <= serving
