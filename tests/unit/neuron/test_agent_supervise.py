"""The agent's supervision of `ray start --block`: READY=1 once the node has
joined, signals passed on to the child, the child's exit status (real child
processes: `sh`; a fake `joined`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.notify import NotifySocket
from neuron.agent import exit_status, supervise


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock.path))
    yield sock
    sock.close()


def _drain(sock: NotifySocket) -> list[str]:
    sock.sock.settimeout(0.5)
    try:
        while True:
            sock.messages += sock.sock.recv(4096).decode().splitlines()
    except TimeoutError:
        return sock.messages


def test_ready_once_the_node_has_joined_and_the_childs_status_is_the_agents(
    notify_socket: NotifySocket, tmp_path: Path
) -> None:
    marker = tmp_path / "joined"
    calls: list[int] = []

    def joined(pgid: int) -> str | None:
        calls.append(pgid)
        return "node-1" if marker.exists() else None

    # The child "joins" after a moment, runs on, then fails with status 3.
    script = f"sleep 0.3; touch {marker}; sleep 0.6; exit 3"
    assert supervise(["sh", "-c", script], joined, "joined", poll_s=0.05) == 3
    messages = _drain(notify_socket)
    assert messages.index("READY=1") < messages.index("STOPPING=1")
    assert "STATUS=joined as node node-1" in messages
    assert messages.count("READY=1") == 1
    # Asked about the child's own process group (it leads one).
    assert calls and all(pgid == calls[0] for pgid in calls)


def test_ray_start_is_told_not_to_wait_out_its_drain(notify_socket: NotifySocket) -> None:
    """Ray's own drain on SIGTERM would wait 30 s for detached replicas."""
    script = '[ "$RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S" = 0 ] && exit 7 || exit 1'
    assert supervise(["sh", "-c", script], lambda pgid: None, "joined", 0.05) == 7


def test_no_ready_for_a_child_that_never_joins(notify_socket: NotifySocket) -> None:
    assert supervise(["sh", "-c", "sleep 0.3; exit 1"], lambda pgid: None, "joined", 0.05) == 1
    assert "READY=1" not in _drain(notify_socket)


def test_sigterm_goes_to_the_child_and_a_requested_stop_exits_0(
    notify_socket: NotifySocket, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    stopped = tmp_path / "stopped"
    # The child records the SIGTERM it gets and exits as Ray does on one.
    script = f"trap 'touch {stopped}; exit 0' TERM; touch {started}; while :; do sleep 0.05; done"

    def joined(pgid: int) -> str | None:
        if started.exists():
            os.kill(os.getpid(), signal.SIGTERM)  # systemd stopping the agent
            return "node-1"
        return None

    before = signal.getsignal(signal.SIGTERM)
    assert supervise(["sh", "-c", script], joined, "joined", poll_s=0.05) == 0
    assert stopped.exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the agent's handler is undone


def test_exit_status() -> None:
    assert exit_status(0, asked_to_stop=True) == 0
    assert exit_status(-signal.SIGTERM, asked_to_stop=True) == 0
    assert exit_status(-signal.SIGKILL, asked_to_stop=True) == 128 + signal.SIGKILL
    assert exit_status(-signal.SIGTERM, asked_to_stop=False) == 128 + signal.SIGTERM
    # Ray's own exit after the drain a passed-on SIGTERM started.
    assert exit_status(1, asked_to_stop=True) == 0
    assert exit_status(1, asked_to_stop=False) == 1
    assert exit_status(0, asked_to_stop=False) == 0


def test_the_child_dies_with_the_agent(tmp_path: Path) -> None:
    """The child gets SIGTERM when the agent is SIGKILLed (PR_SET_PDEATHSIG)."""
    import subprocess
    import time

    pidfile = tmp_path / "child.pid"
    code = (
        "import sys; from neuron.agent import supervise; "
        f"supervise(['sh', '-c', 'echo $$ > {pidfile}; exec sleep 60'], lambda p: None, 'x')"
    )
    agent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ})
    try:
        deadline = time.monotonic() + 20
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline and agent.poll() is None
            time.sleep(0.05)
        child = int(pidfile.read_text())
        agent.kill()
        agent.wait()
        deadline = time.monotonic() + 10
        while _alive(child):
            assert time.monotonic() < deadline, "the child outlived the agent"
            time.sleep(0.05)
    finally:
        agent.kill()
        agent.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped by init) counts as gone.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
