"""The controller acting on the desired count of an autoscaled model,
through the fake backend and a hand-moved clock."""

from __future__ import annotations

import asyncio
from typing import Any

from axon.generations import Generation
from cortex.cluster.backend import Health, Liveness
from cortex.cluster.controller import Controller, ControllerConfig
from cortex.cluster.status import CortexReport, ReplicaState
from harness.clock import ManualClock, settle, until
from tests.unit.cortex.cluster.fakes import FakeBackend, node
from tests.unit.cortex.cluster.test_controller import chat, model, spec, started, tick

NODES = [node(f"n-{i}", Generation.ADA, gpus=1) for i in range(4)]


def scaled(**table: Any) -> dict[str, Any]:
    base = {"max_replicas": 4, "target_in_flight": 10, "scale_up_after_s": 3}
    model = chat(autoscale=base | table)
    del model["replicas"]  # the table's min_replicas is the starting count
    return model


def report(controller: Controller, in_flight: dict[str, int], queued: int = 0) -> None:
    controller.report(
        CortexReport(
            instance="gw:1",
            host="gw",
            pid=1,
            in_flight=in_flight,
            table_version=1,
            queued={"chat": queued} if queued else {},
        )
    )


def addresses(controller: Controller) -> list[str]:
    return [e.address for e in controller.table.endpoints]


async def under_load(
    controller: Controller, clock: ManualClock, in_flight: dict[str, int], passes: int
) -> None:
    """A cortex reports `in_flight` before each of `passes` passes, a second apart."""
    for _ in range(passes):
        report(controller, in_flight)
        await tick(controller, clock)


def active(controller: Controller) -> list[str]:
    return [r.id for r in model(controller).replicas if r.state is not ReplicaState.DRAINING]


async def test_load_scales_up_after_the_delay_and_the_least_busy_replica_drains_first() -> None:
    controller, backend, clock = await started(NODES, spec(scaled(scale_down_after_s=30)))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 35}, 4)
    assert model(controller).desired == 4
    assert len(addresses(controller)) == 4
    status = model(controller).autoscale
    assert status is not None
    assert (status.direction, status.reason) == ("up", "load")
    assert status.detail is not None and "35 in flight" in status.detail
    # The load falls to what 3 replicas carry; the busiest keep serving.
    busy = {a: 8 for a in addresses(controller)}
    quiet = addresses(controller)[2]
    busy[quiet] = 0
    await under_load(controller, clock, busy, 31)
    assert model(controller).desired == 3
    drained = [r for r in model(controller).replicas if r.state is ReplicaState.DRAINING]
    assert [r.address for r in drained] == [quiet]
    await tick(controller, clock, 2.0)
    assert [r.address for r in model(controller).replicas if r.id in backend.drained] == []
    assert quiet not in addresses(controller)
    assert len(addresses(controller)) == 3


async def test_with_no_room_the_status_says_which_generations_would_fit() -> None:
    controller, backend, clock = await started(NODES[:1], spec(scaled()))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 30}, 4)
    status = model(controller)
    assert status.desired == 3
    assert len(status.replicas) == 1  # nothing left pending on the cluster
    assert status.unplaceable == (
        "no room for another replica: no node has 1 free GPUs; "
        "it would fit on a node of generation ada, hopper, blackwell with 1 free"
    )
    assert len(backend.created) == 1


async def test_a_model_below_its_min_gets_the_free_gpu_before_another_scales_up() -> None:
    controller, _, clock = await started(NODES[:2], spec(scaled()))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 30}, 3)  # chat wants 3 for 2 s: not yet
    # A model added now is below its min when chat's scale-up fires.
    late = scaled() | {"id": "late"}
    await clock.elapse(1.0)
    report(controller, {first: 30})
    await controller.apply(spec(scaled(), late), start_loop=False)
    await settle()
    status = {m.id: m for m in controller.status().models}
    assert status["chat"].desired == 3
    assert (len(status["chat"].replicas), len(status["late"].replicas)) == (1, 1)
    assert status["chat"].unplaceable is not None


async def test_a_model_at_zero_wakes_on_a_queued_request_and_idles_back_to_zero() -> None:
    table = {"min_replicas": 0, "scale_to_zero_after_s": 20, "scale_down_after_s": 5}
    controller, _, clock = await started(NODES, spec(scaled(**table)))
    assert model(controller).desired == 0 and addresses(controller) == []
    report(controller, {}, queued=1)
    await tick(controller, clock)
    assert model(controller).desired == 1
    [address] = addresses(controller)
    status = model(controller).autoscale
    assert status is not None and status.reason == "wake"
    await under_load(controller, clock, {address: 0}, 21)
    assert model(controller).desired == 0
    await tick(controller, clock, 2.0)
    assert addresses(controller) == []


async def test_a_restarted_controller_keeps_the_scaled_up_replicas_without_double_counting() -> (
    None
):
    controller, backend, clock = await started(NODES, spec(scaled()))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 30}, 4)
    assert len(backend.started) == 3
    # A new controller over the same cluster (the old one died mid-scale).
    new = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await new.apply(spec(scaled()), start_loop=False)
    await settle()
    assert model(new).desired == 3
    assert len(active(new)) == 3
    assert len(backend.started) == 3  # none started twice, none orphaned
    assert sorted(backend.actors) == sorted(active(new))


async def test_a_replica_still_starting_when_the_controller_restarts_is_replaced_once() -> None:
    controller, backend, clock = await started(NODES, spec(scaled()))
    backend.start_s = 100.0  # the next neurons take long to start
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 20}, 4)
    assert len(active(controller)) == 2
    backend.health = {r: Health(Liveness.SERVING, running=20, waiting=0) for r in backend.actors}
    new = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await new.apply(spec(scaled()), start_loop=False)
    await settle()
    # The starting one was killed at adoption (never SERVING) and the count
    # recomputed from the serving one: no orphan left on the cluster.
    assert sorted(backend.actors) == sorted(active(new))
    assert model(new).desired >= 1


async def test_the_answer_to_a_report_carries_the_counts_decisions_and_load_times() -> None:
    controller, _, clock = await started(NODES, spec(scaled()))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 30}, 4)
    controller.report(
        CortexReport(instance="gw:1", host="gw", pid=1, in_flight={}, table_version=1)
    )
    view = controller.report(
        CortexReport(instance="gw:1", host="gw", pid=1, in_flight={}, table_version=1)
    )
    assert view.desired == {"chat": 3}
    assert view.decisions == {"chat/up/load": 1}
    assert set(view.load_s) == {"chat"}


async def test_a_cortex_restart_reapplying_the_spec_keeps_the_scaled_count() -> None:
    controller, backend, clock = await started(NODES, spec(scaled()))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 30}, 4)
    assert model(controller).desired == 3
    await controller.apply(spec(scaled()), start_loop=False)  # what a new cortex does
    await settle()
    assert model(controller).desired == 3
    assert len(backend.created) == 3  # nothing placed again


async def test_a_controller_restart_during_a_scale_down_leaves_no_orphan() -> None:
    controller, backend, clock = await started(NODES, spec(scaled(scale_down_after_s=2)))
    [first] = addresses(controller)
    await under_load(controller, clock, {first: 30}, 4)
    for _ in range(8):
        report(controller, dict.fromkeys(addresses(controller), 1))
        await tick(controller, clock, 0.5)
        if model(controller).desired == 1:
            break  # the drains wait DRAIN_DELAY_S before they stop anything
    assert model(controller).desired == 1
    draining = [r.id for r in model(controller).replicas if r.state is ReplicaState.DRAINING]
    assert draining
    # The controller dies with drains in flight; its replicas still run.
    new = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await new.apply(spec(scaled(scale_down_after_s=2)), start_loop=False)
    await settle()
    assert sorted(backend.actors) == sorted(r.id for r in model(new).replicas)  # none orphaned
    assert model(new).desired == len(backend.actors)  # each counted once
    await under_load(new, clock, {}, 6)  # the load is gone: down again, through drains
    assert model(new).desired == 1
    assert len(backend.actors) == 1


async def test_the_loop_runs_a_pass_each_interval_and_one_at_once_for_a_wake() -> None:
    clock = ManualClock(0.0)
    controller = Controller(
        FakeBackend(NODES, clock), clock, ControllerConfig(health_interval_s=10.0)
    )
    await controller.apply(spec(scaled(min_replicas=0)))  # the loop's first pass
    await until(lambda: controller.status().passes == 1 and clock.sleeping == 1)
    await clock.elapse(10.0)
    await until(lambda: controller.status().passes == 2 and clock.sleeping == 1)
    report(controller, {}, queued=1)  # a request waits for the model at zero
    await until(lambda: controller.status().passes == 3)
    assert clock.now == 10.0  # not the interval: the wake
    assert model(controller).desired == 1
    stopping = asyncio.create_task(controller.shutdown())
    await settle()
    await clock.elapse(1.0)
    await stopping
