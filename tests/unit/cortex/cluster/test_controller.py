"""The controller driven through a fake backend and a hand-moved clock: every
pass is a `tick()` the test runs, every wait is the clock's."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

from axon.generations import Generation
from cortex.cluster.backend import Health, Liveness, ReplicaRequest
from cortex.cluster.controller import Controller, ControllerConfig
from cortex.cluster.placement import NodeView
from cortex.cluster.reports import REPORT_TTL_S
from cortex.cluster.spec import DeploymentSpec
from cortex.cluster.status import ClusterStatus, CortexReport, ModelStatus, ReplicaState
from harness.clock import ManualClock, settle
from tests.unit.cortex.cluster.fakes import FakeBackend, node

ADA = node("n-ada", Generation.ADA, gpus=2)
BLACKWELL = node("n-bw", Generation.BLACKWELL, gpus=2)
NOT_SERVING = Health(Liveness.NOT_SERVING, "health check not SERVING")


def chat(replicas: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "id": "chat",
        "source": "sim",
        "replicas": replicas,
        "min_generation": "ada",
        "engine": {"kind": "sim"},
        **fields,
    }


def spec(*models: dict[str, Any]) -> DeploymentSpec:
    return DeploymentSpec.model_validate({"models": list(models)})


async def started(
    nodes: list[NodeView], deployment: DeploymentSpec
) -> tuple[Controller, FakeBackend, ManualClock]:
    clock = ManualClock(0.0)
    backend = FakeBackend(nodes, clock)
    controller = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await controller.apply(deployment, start_loop=False)
    await settle()
    return controller, backend, clock


async def tick(controller: Controller, clock: ManualClock, seconds: float = 1.0) -> None:
    await clock.elapse(seconds)
    await controller.tick()
    await settle()


def table(controller: Controller) -> list[str]:
    return [e.replica for e in controller.table.endpoints]


def model(controller: Controller, model_id: str = "chat") -> ModelStatus:
    return next(m for m in controller.status().models if m.id == model_id)


def state(controller: Controller, replica_id: str) -> ReplicaState | None:
    found = [r.state for r in model(controller).replicas if r.id == replica_id]
    return found[0] if found else None


async def test_a_replica_failing_checks_leaves_the_table_after_3_and_is_replaced_after_10() -> None:
    controller, backend, clock = await started([ADA], spec(chat()))
    [first] = table(controller)
    backend.health[first] = NOT_SERVING
    for failed in range(1, 10):
        await tick(controller, clock)
        if failed < 3:
            assert state(controller, first) is ReplicaState.READY
            assert table(controller) == [first]
        else:
            assert state(controller, first) is ReplicaState.UNHEALTHY
            assert table(controller) == []
    assert backend.killed == [] and len(backend.created) == 1
    await tick(controller, clock)
    assert backend.killed == [first]
    [second] = table(controller)
    assert second != first
    [failover] = controller.status().failovers
    assert (failover.replica, failover.replacement) == (first, second)
    assert failover.reason == "not SERVING for 10 checks"


async def test_an_unhealthy_replica_that_serves_again_returns_with_a_clean_count() -> None:
    controller, backend, clock = await started([ADA], spec(chat()))
    [first] = table(controller)
    backend.health[first] = NOT_SERVING
    for _ in range(3):
        await tick(controller, clock)
    assert table(controller) == []
    del backend.health[first]
    await tick(controller, clock)
    assert table(controller) == [first]
    backend.health[first] = NOT_SERVING
    await tick(controller, clock)
    await tick(controller, clock)
    assert state(controller, first) is ReplicaState.READY


async def test_a_dead_node_s_replica_is_replaced_on_another_node() -> None:
    controller, backend, clock = await started([ADA, BLACKWELL], spec(chat()))
    [first] = table(controller)
    assert backend.created[0].preferred_node == "n-ada"
    # The node is gone: its actor does not answer, Ray reports the node dead.
    backend.node_list = [node("n-ada", Generation.ADA, gpus=2, alive=False), BLACKWELL]
    backend.health[first] = Health(Liveness.GONE, "RayActorError")
    backend.start_s = 3.0
    await tick(controller, clock)
    assert backend.killed == [first]
    assert backend.created[1].preferred_node == "n-bw"
    assert table(controller) == []
    await clock.elapse(3.0)
    [second] = table(controller)
    status = controller.status()
    assert [r.node_id for r in model(controller).replicas] == ["n-bw"]
    assert [n.alive for n in status.nodes] == [False, True]
    assert status.failovers[0].reason == "its actor is gone (RayActorError)"
    assert status.failovers[0].replacement == second
    assert status.failovers[0].seconds_to_ready == 3.0


@pytest.mark.parametrize(("later_s", "preferred"), [(14.0, None), (16.0, "n-ada")])
async def test_a_node_where_an_actor_died_is_avoided_for_15_s(
    later_s: float, preferred: str | None
) -> None:
    controller, backend, clock = await started([ADA, BLACKWELL], spec(chat()))
    [first] = table(controller)
    # The actor is gone, but its node still looks alive (Ray is slow to tell).
    backend.health[first] = Health(Liveness.GONE, "RayActorError")
    await tick(controller, clock)
    [second] = table(controller)
    assert backend.created[1].preferred_node == "n-bw"
    backend.health[second] = Health(Liveness.GONE, "RayActorError")
    await tick(controller, clock, later_s)
    # n-bw is suspect now too; n-ada only until 15 s after the first death.
    assert backend.created[2].preferred_node == preferred


async def test_a_scale_down_takes_the_replica_out_of_the_table_then_stops_it() -> None:
    controller, backend, clock = await started([ADA, BLACKWELL], spec(chat(2)))
    assert table(controller) == ["chat-1", "chat-2"]
    await controller.apply(spec(chat(1)), start_loop=False)
    await settle()
    # The newest one drains: out of the table at once, not stopped yet.
    assert table(controller) == ["chat-1"]
    assert state(controller, "chat-2") is ReplicaState.DRAINING
    await clock.elapse(0.5)
    assert backend.drained == [] and backend.killed == []
    await clock.elapse(0.5)
    assert backend.drained == ["chat-2"] and backend.killed == ["chat-2"]
    assert [r.id for r in model(controller).replicas] == ["chat-1"]


async def test_a_check_in_flight_when_a_replica_starts_draining_does_not_undo_the_drain() -> None:
    controller, backend, clock = await started([ADA, BLACKWELL], spec(chat(2)))
    # A pass whose checks are still waiting for the replicas' answers...
    gate = asyncio.Event()
    backend.check_gate = gate
    running = asyncio.create_task(controller.tick())
    await settle()
    backend.check_gate = None
    # ...when the scale-down drains chat-2.
    await controller.apply(spec(chat(1)), start_loop=False)
    await settle()
    assert state(controller, "chat-2") is ReplicaState.DRAINING
    gate.set()  # the SERVING answers come back
    await running
    await settle()
    # Still draining and out of the table: its in-flight requests keep their
    # neuron, which is stopped only after the drain delay, and drained first.
    assert state(controller, "chat-2") is ReplicaState.DRAINING
    assert table(controller) == ["chat-1"]
    assert backend.killed == []
    await clock.elapse(1.0)
    assert backend.drained == ["chat-2"] and backend.killed == ["chat-2"]


async def test_a_model_removed_from_the_spec_is_drained() -> None:
    controller, backend, clock = await started([ADA], spec(chat()))
    await controller.apply(spec(), start_loop=False)
    await settle()
    assert table(controller) == []
    await clock.elapse(1.0)
    assert backend.drained == ["chat-1"]


async def test_an_unplaceable_model_gets_no_replica_and_a_reason() -> None:
    hopper = {"id": "big", "source": "sim", "generations": ["hopper"], "engine": {"kind": "sim"}}
    controller, backend, clock = await started([ADA], spec(hopper))
    passes = controller.status().passes
    for _ in range(3):
        await tick(controller, clock)
    assert controller.status().passes == passes + 3  # what the integration test waits on
    assert backend.created == []
    big = model(controller, "big")
    assert big.replicas == []
    assert big.unplaceable == (
        "no node of generation hopper in the cluster (generations present: ada)"
    )
    # A node that can take it joins: placed at the next pass, reason gone.
    backend.node_list = [ADA, node("n-hopper", Generation.HOPPER)]
    await tick(controller, clock)
    assert [r.preferred_node for r in backend.created] == ["n-hopper"]
    assert model(controller, "big").unplaceable is None


async def test_start_failures_back_off_2_4_and_so_on_up_to_60_s() -> None:
    error = "the neuron exited with code 1 during start-up: CUDA out of memory"
    backend = FakeBackend([ADA])
    backend.start_errors["chat"] = error
    clock = ManualClock(0.0)
    controller = Controller(backend, clock, ControllerConfig())
    await controller.apply(spec(chat()), start_loop=False)
    await settle()
    attempts = [0.0]
    while clock.now < 190:
        await tick(controller, clock)
        if len(backend.created) > len(attempts):
            attempts.append(clock.now)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps == [2, 4, 8, 16, 32, 60, 60]
    assert model(controller).last_start_error == error
    assert model(controller).replicas == []
    # Once a start succeeds the back-off and the error are gone.
    del backend.start_errors["chat"]
    await tick(controller, clock, 60)
    assert len(table(controller)) == 1
    assert model(controller).last_start_error is None


async def test_a_crowded_node_gives_up_a_replica_to_a_node_that_joins() -> None:
    controller, backend, clock = await started([ADA], spec(chat(2)))
    # Nowhere else to go: both on the one node.
    assert [r.node_id for r in model(controller).replicas] == ["n-ada", "n-ada"]
    backend.node_list = [ADA, BLACKWELL]
    await tick(controller, clock)
    assert state(controller, "chat-2") is ReplicaState.DRAINING
    assert table(controller) == ["chat-1"]
    await tick(controller, clock)  # drained after its delay; the next pass places
    assert backend.drained == ["chat-2"]
    assert backend.created[-1].preferred_node == "n-bw"
    assert sorted(r.node_id or "" for r in model(controller).replicas) == ["n-ada", "n-bw"]
    assert table(controller) == ["chat-1", "chat-3"]


async def test_replicas_start_with_their_serialised_settings() -> None:
    _controller, backend, _ = await started(
        [ADA], spec(chat(engine={"kind": "sim", "sim_ttft_s": 0.2}))
    )
    env = backend.actors["chat-1"].env
    assert env["NEURAXIS_NEURON_ENGINE"] == "sim"
    assert env["NEURAXIS_NEURON_SERVED_ID"] == "chat"
    assert env["NEURAXIS_NEURON_SIM_GENERATION"] == "ada"
    assert env["NEURAXIS_NEURON_SIM_TTFT_S"] == "0.2"
    assert "NEURAXIS_NEURON_PLAINTEXT" not in env


async def test_a_plaintext_cortex_starts_its_replicas_plaintext() -> None:
    # Its neurons listen on their node's address: plaintext must be chosen
    # there too, or they refuse to start.
    clock = ManualClock(0.0)
    backend = FakeBackend([ADA], clock)
    controller = Controller(backend, clock, ControllerConfig(plaintext=True))
    await controller.apply(spec(chat()), start_loop=False)
    await settle()
    assert backend.actors["chat-1"].env["NEURAXIS_NEURON_PLAINTEXT"] == "true"


async def test_the_table_long_poll_wakes_on_a_change() -> None:
    controller, backend, clock = await started([ADA], spec(chat()))
    known = controller.table.version
    assert (await controller.table.wait(known - 1, 0.01))["replicas"][0]["replica"] == "chat-1"
    backend.health["chat-1"] = Health(Liveness.EXITED, "137")
    await tick(controller, clock)
    current = await controller.table.wait(known, 5.0)
    assert current["version"] > known
    assert [r["replica"] for r in current["replicas"]] == ["chat-2"]
    assert controller.status().failovers[0].reason == "its neuron exited with code 137"


async def test_the_controller_s_status_survives_json() -> None:
    controller, backend, clock = await started([ADA, BLACKWELL], spec(chat(2)))
    backend.health["chat-1"] = Health(Liveness.GONE, "RayActorError")
    await tick(controller, clock)
    status = controller.status()
    assert status.failovers and status.nodes and status.models[0].replicas
    assert ClusterStatus.read(json.loads(json.dumps(status.model_dump(mode="json")))) == status


# -- a controller that comes back ---------------------------------------------


async def comes_back(
    backend: FakeBackend, clock: ManualClock, deployment: DeploymentSpec
) -> Controller:
    """A new controller over the same cluster (the old one is gone; its
    detached replicas are still there)."""
    controller = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await controller.apply(deployment, start_loop=False)
    await settle()
    return controller


def endpoints(controller: Controller) -> dict[str, str]:
    return {e.replica: e.address for e in controller.table.endpoints}


async def test_a_new_controller_adopts_the_serving_replicas_without_starting_any() -> None:
    old, backend, clock = await started([ADA, BLACKWELL], spec(chat(2)))
    before = endpoints(old)
    pids = {r.id: r.pid for r in model(old).replicas}
    new = await comes_back(backend, clock, spec(chat(2)))
    assert endpoints(new) == before
    assert {r.id: r.pid for r in model(new).replicas} == pids
    assert [state(new, r) for r in before] == [ReplicaState.READY] * 2
    await tick(new, clock)
    assert len(backend.created) == 2 and backend.started == ["chat-1", "chat-2"]
    assert backend.killed == [] and backend.drained == []
    assert endpoints(new) == before


async def test_an_adopted_replica_that_has_died_is_killed_and_replaced() -> None:
    _old, backend, clock = await started([ADA, BLACKWELL], spec(chat(2)))
    backend.health["chat-1"] = Health(Liveness.EXITED, "137")
    new = await comes_back(backend, clock, spec(chat(2)))
    assert backend.killed == ["chat-1"]
    # Its replacement takes a serial after every replica found, never a
    # name already taken.
    assert table(new) == ["chat-2", "chat-3"]
    assert backend.started == ["chat-1", "chat-2", "chat-3"]
    [failover] = new.status().failovers
    assert (failover.replica, failover.replacement) == ("chat-1", "chat-3")
    assert failover.reason == "exited (137)"


async def test_a_replica_whose_start_the_old_controller_left_is_killed_and_replaced() -> None:
    backend = FakeBackend([ADA])
    clock = backend.clock
    # Created, placed, its neuron never reported SERVING.
    backend.create(ReplicaRequest("chat-4", "chat", 4, 0, {}, "n-ada"))
    new = await comes_back(backend, clock, spec(chat()))
    assert backend.killed == ["chat-4"]
    assert table(new) == ["chat-5"]
    assert new.status().failovers == []  # it never served: nothing failed over


async def test_adopted_replicas_past_the_desired_count_are_drained() -> None:
    _old, backend, clock = await started([ADA, BLACKWELL], spec(chat(3)))
    new = await comes_back(backend, clock, spec(chat(2)))
    # The newest goes, as in any scale-down: out of the table, then drained.
    assert table(new) == ["chat-1", "chat-2"]
    assert state(new, "chat-3") is ReplicaState.DRAINING
    await clock.elapse(1.0)
    assert backend.drained == ["chat-3"] and backend.killed == ["chat-3"]
    assert backend.started == ["chat-1", "chat-2", "chat-3"]


async def test_replicas_of_a_model_no_longer_in_the_spec_are_adopted_then_drained() -> None:
    _old, backend, clock = await started([ADA], spec(chat()))
    await comes_back(backend, clock, spec())
    await clock.elapse(1.0)
    assert backend.drained == ["chat-1"]


async def test_a_controller_that_comes_back_to_stop_drains_what_it_finds() -> None:
    _old, backend, clock = await started([ADA, BLACKWELL], spec(chat(2)))
    new = Controller(backend, clock, ControllerConfig())
    stopping = asyncio.create_task(new.shutdown())
    await settle()
    await clock.elapse(1.0)
    await stopping
    assert sorted(backend.drained) == ["chat-1", "chat-2"]
    assert backend.actors == {}


async def test_the_status_shows_each_replicas_engine_load_with_its_age() -> None:
    controller, backend, clock = await started([ADA], spec(chat()))
    [first] = table(controller)
    backend.health[first] = Health(Liveness.SERVING, running=3, waiting=2)
    await tick(controller, clock)
    await clock.elapse(0.5)
    [replica] = model(controller).replicas
    assert (replica.engine_running, replica.engine_waiting, replica.in_flight) == (3, 2, 5)
    assert replica.load_age_s == 0.5
    # A check that cannot read the load keeps the last figures, which age.
    backend.health[first] = Health(Liveness.SERVING)
    await tick(controller, clock, 2.0)
    [replica] = model(controller).replicas
    assert (replica.engine_running, replica.engine_waiting) == (3, 2)
    assert replica.load_age_s == 2.5


async def test_cortex_reports_add_up_per_replica_and_age_out() -> None:
    controller, _backend, clock = await started([ADA], spec(chat()))
    [replica] = model(controller).replicas
    assert replica.address is not None
    assert replica.cortex_in_flight is None  # no cortex has reported
    controller.report(_report("gw-1", 10, {replica.address: 2}))
    await clock.elapse(10.0)
    controller.report(_report("gw-2", 20, {replica.address: 3, "x:1": 7}))
    status = controller.status()
    [replica] = status.models[0].replicas
    assert replica.cortex_in_flight == 5
    assert [(c.instance, c.in_flight, c.reported_s_ago) for c in status.cortices] == [
        ("gw-1:10", 2, 10.0),
        ("gw-2:20", 10, 0.0),
    ]
    # gw-1 stopped reporting: past the TTL it no longer counts.
    await clock.elapse(REPORT_TTL_S - 9.0)
    status = controller.status()
    assert [c.instance for c in status.cortices] == ["gw-2:20"]
    assert status.models[0].replicas[0].cortex_in_flight == 3


def _report(host: str, pid: int, in_flight: dict[str, int]) -> CortexReport:
    return CortexReport(
        instance=f"{host}:{pid}", host=host, pid=pid, in_flight=in_flight, table_version=1
    )
