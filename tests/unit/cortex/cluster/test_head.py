from __future__ import annotations

import os

import pytest

from cortex.cluster import head
from cortex.cluster.head import head_command


def test_the_head_starts_without_the_dashboard_or_the_log_monitor() -> None:
    cmd = head_command(6379, "10.0.0.10", {"neuraxis.io/generation": "cpu"})
    assert cmd[1:4] == ["start", "--head", "--block"]
    assert "--include-dashboard=false" in cmd
    # Every driver joins with log_to_driver=False: nobody reads what it forwards.
    assert "--include-log-monitor=false" in cmd
    assert cmd[cmd.index("--labels") + 1] == "neuraxis.io/generation=cpu"


def test_the_head_is_started_without_rays_drain_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's own drain on SIGTERM would wait 30 s for detached replicas; the
    variable reaches `ray start` whatever environment the caller gave."""
    script = '[ "$RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S" = 0 ] && [ "$MINE" = 1 ] && exit 7'
    monkeypatch.setattr(head, "head_command", lambda *args, **kwargs: ["sh", "-c", script])
    child = head.start_head(6379, "127.0.0.1", env={"MINE": "1", "PATH": os.environ["PATH"]})
    assert child.wait(timeout=10) == 7
