"""The control-plane alerts of deploy/prometheus/rules.yml, run by
Prometheus's own rule tester (`promtool test rules`) on made-up series:
each fires past its threshold and stays quiet below it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.procs import REPO

RULES = REPO / "deploy/prometheus/rules.yml"
# How each test file below begins: the rules, evaluated every minute over
# series sampled every minute.
HEADER = f"""
rule_files:
  - {RULES}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
"""

# One cortex: its table confirmed every 20 s for 5 minutes, then the
# controller and the head lost (the age grows 60 s a minute) at minute 5.
TESTS = """
      - series: 'neuraxis_endpoint_table_age_seconds{{instance="gw:8080",head="h:6379"}}'
        values: '10 15 5 20 10 60 120 180 240 300'
      - series: 'neuraxis_controller_up{{instance="gw:8080",head="h:6379"}}'
        values: '1 1 1 1 1 0 0 0 0 0'
      - series: 'neuraxis_ray_head_up{{instance="gw:8080",head="h:6379"}}'
        values: '1 1 1 1 1 0 0 0 0 0'
    alert_rule_test:
      - eval_time: 4m
        alertname: NeuraxisEndpointTableStale
        exp_alerts: []
      - eval_time: 4m
        alertname: NeuraxisControllerUnseen
        exp_alerts: []
      - eval_time: 4m
        alertname: NeuraxisRayHeadDown
        exp_alerts: []
      # Age 180 s at 7m, above 120 s since 7m: pending for its minute.
      - eval_time: 7m
        alertname: NeuraxisEndpointTableStale
        exp_alerts: []
      - eval_time: 8m
        alertname: NeuraxisEndpointTableStale
        exp_alerts:
          - exp_labels: {{severity: warning, instance: "gw:8080", head: "h:6379"}}
            exp_annotations:
              summary: "cortex gw:8080 routes on a table the controller has not confirmed for 4m 0s"
              description: "{stale}"
      - eval_time: 6m
        alertname: NeuraxisRayHeadDown
        exp_alerts:
          - exp_labels: {{severity: critical, instance: "gw:8080", head: "h:6379"}}
            exp_annotations:
              summary: "The Ray head h:6379 does not answer cortex gw:8080"
              description: "{head}"
      - eval_time: 6m
        alertname: NeuraxisControllerUnseen
        exp_alerts: []
      - eval_time: 7m
        alertname: NeuraxisControllerUnseen
        exp_alerts:
          - exp_labels: {{severity: warning, instance: "gw:8080", head: "h:6379"}}
            exp_annotations:
              summary: "cortex gw:8080 has not reached the controller for 2 minutes"
              description: "{controller}"
"""
STALE = (
    "A lost replica is not replaced and a new one is not routed to until the controller "
    "is back (neuraxis status, the head's and cortex's journals)."
)
HEAD = (
    "Serving goes on from the last table; without GCS fault tolerance the cluster's "
    "replicas are lost when the head does not come back (docs/deploy.md)."
)
CONTROLLER = (
    "cortex re-creates a lost controller itself; a controller unseen this long means "
    "the Ray head (h:6379) or its node is in trouble."
)


def _promtool() -> str:
    """Debian's prometheus package brings promtool; installed when missing."""
    found = shutil.which("promtool")
    if found is None:
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
            check=True,
            env=env,
        )
        found = shutil.which("promtool")
    assert found is not None
    return found


def _assert_rule_tests_pass(tmp_path: Path, series_and_alerts: str) -> None:
    """promtool's verdict on a test file: HEADER, then `series_and_alerts`."""
    tests = tmp_path / "rules_test.yml"
    tests.write_text(HEADER + series_and_alerts)
    result = subprocess.run(
        [_promtool(), "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_control_plane_alerts_fire_past_their_thresholds(tmp_path: Path) -> None:
    tests = TESTS.format(stale=STALE, head=HEAD, controller=CONTROLLER)
    _assert_rule_tests_pass(tmp_path, tests)


# One model: desired 1 (ready 1) for 5 minutes, then the autoscaler wants 3
# and only 2 become ready; at minute 40 the third is ready.
BELOW_DESIRED = """
      - series: 'neuraxis_autoscale_desired_replicas{{instance="gw:8080",model="chat"}}'
        values: '1x4 3x40'
      - series: 'neuraxis_model_healthy_replicas{{instance="gw:8080",model="chat"}}'
        values: '1x4 1 2x34 3x5'
    alert_rule_test:
      - eval_time: 4m
        alertname: NeuraxisModelBelowDesired
        exp_alerts: []
      - eval_time: 19m
        alertname: NeuraxisModelBelowDesired
        exp_alerts: []
      - eval_time: 21m
        alertname: NeuraxisModelBelowDesired
        exp_alerts:
          - exp_labels: {{severity: warning, model: chat}}
            exp_annotations:
              summary: "{summary}"
              description: "{why}"
      - eval_time: 42m
        alertname: NeuraxisModelBelowDesired
        exp_alerts: []
"""
SUMMARY = "Model chat has had fewer ready replicas than the autoscaler wants for 15 minutes"
WHY = (
    "See neuraxis status: AUTOSCALING for the desired count and why, UNPLACEABLE for a "
    "scale-up with no room (and the generations that would fit), the replicas' start errors."
)


def test_a_model_below_its_desired_count_alerts_after_15_minutes(tmp_path: Path) -> None:
    _assert_rule_tests_pass(tmp_path, BELOW_DESIRED.format(summary=SUMMARY, why=WHY))
