"""What `neuraxis up` says while the replicas start, from successive
controller statuses: each transition once, the time to ready, problems."""

from __future__ import annotations

from axon.generations import Generation
from cortex.cluster.status import ClusterStatus, ModelStatus, ReplicaState, ReplicaStatus
from neuraxis.progress import Level, StartProgress


def _status(*replicas: ReplicaStatus, error: str | None = None) -> ClusterStatus:
    model = ModelStatus(
        id="chat",
        desired=1,
        generations=[Generation.CPU],
        gpus_per_replica=0,
        last_start_error=error,
        replicas=list(replicas),
    )
    return ClusterStatus(models=[model])


def _replica(state: str, address: str | None = None) -> ReplicaStatus:
    return ReplicaStatus(
        id="chat-1", state=ReplicaState(state), generation=Generation.CPU, address=address
    )


def test_loading_then_ready_with_the_time_it_took() -> None:
    progress = StartProgress()
    assert progress.update(_status(), now=0.0) == []
    assert progress.update(_status(_replica("pending")), now=1.0) == []
    (loading,) = progress.update(_status(_replica("starting")), now=2.0)
    assert loading.level is Level.INFO
    assert loading.text == "chat: loading (chat-1 on cpu)"
    assert progress.update(_status(_replica("starting")), now=20.0) == []
    (ready,) = progress.update(_status(_replica("ready", "127.0.0.1:5")), now=31.5)
    assert ready.text == "chat: ready in 30.5 s at 127.0.0.1:5"
    assert progress.update(_status(_replica("ready", "127.0.0.1:5")), now=33.0) == []


def test_a_start_failure_is_a_warning_said_once_on_one_line() -> None:
    progress = StartProgress()
    error = "the neuron exited with code 1 during start-up:\n{...}\nValueError: bad"
    (line,) = progress.update(_status(error=error), now=0.0)
    assert line.level is Level.WARNING
    assert line.text == (
        "chat failed to start: the neuron exited with code 1 during start-up: {...} ValueError: bad"
    )
    assert progress.update(_status(error=error), now=1.0) == []
