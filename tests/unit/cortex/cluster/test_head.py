from __future__ import annotations

from cortex.cluster.head import head_command


def test_the_head_starts_without_the_dashboard_or_the_log_monitor() -> None:
    cmd = head_command(6379, "10.0.0.10", {"neuraxis.io/generation": "cpu"})
    assert cmd[1:4] == ["start", "--head", "--block"]
    assert "--include-dashboard=false" in cmd
    # Every driver joins with log_to_driver=False: nobody reads what it forwards.
    assert "--include-log-monitor=false" in cmd
    assert cmd[cmd.index("--labels") + 1] == "neuraxis.io/generation=cpu"
