from __future__ import annotations

from cortex.cluster.backend import Health, Liveness, RunningReplica, Started
from cortex.cluster.decisions import (
    ReplicaRecord,
    adoption_refusal,
    avoided_nodes,
    backoff_delay,
    health_verdict,
    moved_off,
    next_serial,
    rebalance_mover,
    scale_down_victims,
)
from cortex.cluster.status import ReplicaState

READY = ReplicaState.READY
UNHEALTHY = ReplicaState.UNHEALTHY
FAILED = Health(Liveness.NOT_SERVING, "not SERVING")


def _replica(serial: int, state: ReplicaState = READY, node: str = "n1") -> ReplicaRecord:
    return ReplicaRecord(f"m-{serial}", "m", serial, 100.0, state=state, node_id=node)


def test_failed_checks_make_a_replica_unhealthy_at_3_and_lost_at_10() -> None:
    assert health_verdict(READY, 1, FAILED).state is READY
    third = health_verdict(READY, 2, FAILED)
    assert (third.state, third.failures, third.lost) == (UNHEALTHY, 3, None)
    assert health_verdict(UNHEALTHY, 8, FAILED).lost is None
    tenth = health_verdict(UNHEALTHY, 9, FAILED)
    assert tenth.lost == "not SERVING for 10 checks" and not tenth.node_suspect


def test_a_serving_check_clears_the_count() -> None:
    verdict = health_verdict(UNHEALTHY, 7, Health(Liveness.SERVING, running=1, waiting=1))
    assert (verdict.state, verdict.failures, verdict.lost) == (READY, 0, None)


def test_a_gone_actor_is_lost_at_once_and_its_node_suspect() -> None:
    gone = health_verdict(READY, 0, Health(Liveness.GONE, "RayActorError"))
    assert gone.lost == "its actor is gone (RayActorError)" and gone.node_suspect
    exited = health_verdict(READY, 0, Health(Liveness.EXITED, "-9"))
    assert exited.lost == "its neuron exited with code -9" and not exited.node_suspect


def test_backoff_doubles_from_2_s_up_to_60_s() -> None:
    assert [backoff_delay(n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert backoff_delay(10_000) == 60


def test_a_scale_down_drains_replicas_not_serving_first_then_the_newest() -> None:
    old, new, starting = _replica(1), _replica(2), _replica(3, ReplicaState.STARTING)
    unhealthy = _replica(4, UNHEALTHY)
    assert scale_down_victims([old, new, starting, unhealthy], 2) == [starting, unhealthy]
    assert scale_down_victims([old, new], 1) == [new]
    assert scale_down_victims([old, new], 2) == []


def test_a_rebalance_moves_the_newest_of_a_crowded_node_at_most_every_10_s() -> None:
    crowded = [_replica(1), _replica(2), _replica(3, node="n2")]
    assert rebalance_mover(crowded, True, float("-inf"), 0.0) is crowded[1]
    assert rebalance_mover(crowded, True, 0.0, 9.9) is None
    assert rebalance_mover(crowded, True, 0.0, 10.0) is crowded[1]
    # Nowhere to go, nothing crowded, or a replica not ready yet: no move.
    assert rebalance_mover(crowded, False, float("-inf"), 0.0) is None
    assert rebalance_mover(crowded[1:], True, float("-inf"), 0.0) is None
    busy = [*crowded[:2], _replica(3, ReplicaState.STARTING, node="n2")]
    assert rebalance_mover(busy, True, float("-inf"), 0.0) is None


def test_a_draining_node_gives_up_idle_replicas_at_once_and_serving_ones_as_others_serve() -> None:
    leaving = [_replica(1, node="d"), _replica(2, ReplicaState.STARTING, node="d")]
    # No replacement serves yet: only the one not serving goes.
    assert moved_off([_replica(3, ReplicaState.STARTING)], leaving, 1) == [leaving[1]]
    # A replacement serves: the serving one can go too.
    assert moved_off([_replica(3)], leaving, 1) == [leaving[1], leaving[0]]


def test_suspect_nodes_are_avoided_until_their_time() -> None:
    assert avoided_nodes({"a": 15.0, "b": 5.0}, 10.0) == frozenset({"a"})


def _running(serial: int, address: str | None = "127.0.0.1:50051") -> RunningReplica:
    started = Started(address, 9400, 7, "/logs/n.log") if address else None
    return RunningReplica(f"m-{serial}", "m", serial, "n1", "10.0.0.1", None, 100.0, started)


def test_only_a_replica_whose_neuron_serves_is_adopted() -> None:
    serving = Health(Liveness.SERVING, running=1, waiting=1)
    assert adoption_refusal(_running(1), serving) is None
    assert adoption_refusal(_running(1), FAILED) == "not_serving (not SERVING)"
    assert adoption_refusal(_running(1), Health(Liveness.EXITED, "137")) == "exited (137)"
    never = adoption_refusal(_running(1, address=None), serving)
    assert never is not None and "never reported SERVING" in never


def test_new_serials_come_after_every_replica_found() -> None:
    assert next_serial([]) == 1
    assert next_serial([_running(7), _running(3)]) == 8
