"""Metrics, service discovery, alert rules, the dashboard and JSON logs,
checked against a real Prometheus scraping the running embedded stack."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import services
from harness.polling import wait_until
from harness.ports import free_port
from harness.procs import REPO
from harness.stacks import MODEL, SimStack, Stack

DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus/rules.yml"
CHAT = "/v1/chat/completions"


def _ensure_prometheus() -> None:
    """The test setup installs Debian's prometheus package when it is missing."""
    services.prometheus_binary()


@pytest.fixture(scope="module")
def prometheus(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _ensure_prometheus()
    work = tmp_path_factory.mktemp("prometheus")
    admin = stack.admin_url.removeprefix("http://")
    config = (DEPLOY / "prometheus/prometheus.yml").read_text()
    assert "127.0.0.1:9180" in config  # cortex's default admin listener
    config = config.replace("127.0.0.1:9180", admin)
    config = config.replace("scrape_interval: 15s", "scrape_interval: 1s")
    config = config.replace("evaluation_interval: 15s", "evaluation_interval: 1s")
    config = config.replace("refresh_interval: 15s", "refresh_interval: 1s")
    config = config.replace("- rules.yml", f"- {DEPLOY / 'prometheus/rules.yml'}")
    (work / "prometheus.yml").write_text(config)
    port = free_port()
    with open(work / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # not ready (503) polled as gently as not listening
        # Both jobs up: cortex, and the two neurons found through discovery.
        _wait_for(base, 'count(up{job="neuraxis-neurons"} == 1)', lambda v: v == 2)
        _wait_for(base, 'count(up{job="neuraxis-cortex"} == 1)', lambda v: v == 1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    r.raise_for_status()
    return list(r.json()["data"]["result"])


def _scalar(base: str, expr: str) -> float:
    result = _query(base, expr)
    return float(result[0]["value"][1]) if result else 0.0


def _wait_for(base: str, expr: str, ok: Any, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    value = _scalar(base, expr)
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = _scalar(base, expr)
    assert ok(value), f"{expr} = {value}"
    return value


def test_promtool_accepts_config_and_rules() -> None:
    _ensure_prometheus()
    for args in (
        ["check", "config", str(DEPLOY / "prometheus/prometheus.yml")],
        ["check", "rules", str(DEPLOY / "prometheus/rules.yml")],
    ):
        result = subprocess.run(["promtool", *args], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_ttft_count_matches_requests_sent(stack: Stack, prometheus: str) -> None:
    expr = f'sum(neuraxis_time_to_first_token_seconds_count{{api="chat",model="{MODEL}"}})'
    before = _scalar(prometheus, expr)
    client = stack.client()
    sent = 5
    for i in range(sent):
        messages: Any = [{"role": "user", "content": f"Say {i}."}]
        if i % 2:
            list(
                client.chat.completions.create(
                    model=MODEL, messages=messages, max_tokens=3, stream=True
                )
            )
        else:
            client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)
    after = _wait_for(prometheus, expr, lambda v: v >= before + sent)
    assert after == before + sent


def test_neuron_metrics_arrive_through_service_discovery(prometheus: str) -> None:
    series = _query(prometheus, "vllm:num_requests_running")
    labels = sorted((s["metric"]["model"], s["metric"]["generation"]) for s in series)
    assert labels == [("all-minilm-l6-v2", "cpu"), (MODEL, "cpu")]
    assert all(s["metric"]["replica"] for s in series)
    grpc = _query(prometheus, 'neuraxis_neuron_grpc_requests_total{method="Generate"}')
    assert grpc and all(s["metric"]["job"] == "neuraxis-neurons" for s in grpc)


def test_error_counter_moves_for_a_failed_request(stack: Stack, prometheus: str) -> None:
    expr = 'sum(neuraxis_requests_total{api="chat",outcome="client_error"})'
    before = _scalar(prometheus, expr)
    r = httpx.post(
        f"{stack.base_url}{CHAT}",
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
    )
    assert r.status_code == 404
    _wait_for(prometheus, expr, lambda v: v == before + 1)


def test_alert_rules_are_loaded(prometheus: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        groups = httpx.get(f"{prometheus}/api/v1/rules").json()["data"]["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        # Health is "unknown" until a rule's first evaluation.
        if all(r["health"] != "unknown" for r in rules) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    names = {rule["name"] for rule in rules}
    # Every alert the file defines is loaded, and each evaluates cleanly.
    defined = re.findall(r"^\s*- alert: (\w+)\s*$", RULES.read_text(), re.MULTILINE)
    assert names == set(defined) and "NeuraxisModelWithoutHealthyReplica" in names
    assert [r["health"] for r in rules] == ["ok"] * len(defined), rules


def _exposed_names(text: str) -> set[str]:
    """Every sample name a /metrics body can produce, samples or not yet."""
    names = {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}
    for match in re.finditer(r"^# TYPE (\S+) (\w+)$", text, re.MULTILINE):
        name, kind = match.groups()
        # The text format already names a counter with its _total (a counter
        # with no sample yet, a model never woken, shows only this line).
        base = name.removesuffix("_total") if kind == "counter" else name
        names |= {base + suffix for suffix in suffixes.get(kind, [""])}
    return names


def test_dashboard_and_rules_use_only_live_metric_names(stack: Stack) -> None:
    live = _exposed_names(httpx.get(f"{stack.admin_url}/metrics").text)
    for group in httpx.get(f"{stack.admin_url}/sd/neurons").json():
        live |= _exposed_names(httpx.get(f"http://{group['targets'][0]}/metrics").text)
    dashboard = json.loads((DEPLOY / "grafana/neuraxis.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append((DEPLOY / "prometheus/rules.yml").read_text())
    used = {
        m
        for e in exprs
        for m in re.findall(r"\b(?:neuraxis_[a-z_]+|vllm:[a-z_:]+|process_[a-z_]+)\b", e)
    }
    assert len(used) >= 12
    assert used <= live, f"not exported: {sorted(used - live)}"


def _logged(paths: list[Path], request_id: str, loggers: set[str]) -> list[dict[str, Any]]:
    """The JSON lines of `paths` that carry `request_id`, once `loggers`
    have all written one (logs are written a moment after the answer)."""
    lines: list[dict[str, Any]] = []

    def found() -> bool:
        lines[:] = [
            json.loads(line)
            for path in paths
            for line in path.read_text(errors="replace").splitlines()
            if line.startswith("{") and request_id in line
        ]
        return loggers <= {x["logger"] for x in lines}

    wait_until(found, timeout_s=10, interval_s=0.2)
    return lines


def _chat_with(base_url: str, model: str, marker: str) -> str:
    body = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": marker}]}
    r = httpx.post(f"{base_url}{CHAT}", json=body, timeout=60)
    request_id: str = r.headers["x-request-id"]
    assert request_id == r.json()["id"]
    return request_id


def test_json_logs_carry_the_request_id_and_no_text(
    stack: Stack, sim_stack: SimStack, logs_dir: Path
) -> None:
    # The replicas' neurons (real vLLM) log to their own files; `up` on a
    # terminal prints none of cortex's request logs, so cortex's are read
    # where it logs to a file: the session's cortex in front of sim neurons.
    marker = f"zebra-{uuid.uuid4().hex}"
    request_id = _chat_with(stack.base_url, MODEL, marker)
    replica_logs = sorted((stack.state_dir / "replicas").glob("*.log"))
    assert len(replica_logs) == 2
    lines = _logged(replica_logs, request_id, {"neuraxis.neuron"})
    assert {line["logger"] for line in lines} == {"neuraxis.neuron"}
    assert all(line["request_id"] == request_id for line in lines)
    assert not any(
        marker in p.read_text(errors="replace") for p in [*replica_logs, stack.proc.log_path]
    )

    request_id = _chat_with(sim_stack.base_url, sim_stack.healthy_model, marker)
    # The healthy model's neuron is the stack's first (harness/stacks.py).
    sim_logs = [logs_dir / "sim-cortex.log", logs_dir / "sim-neuron0.log"]
    lines = _logged(sim_logs, request_id, {"neuraxis.cortex.requests", "neuraxis.neuron"})
    assert {"neuraxis.cortex.requests", "neuraxis.neuron"} <= {line["logger"] for line in lines}
    assert all(line["request_id"] == request_id for line in lines)
    assert not any(marker in p.read_text(errors="replace") for p in sim_logs)


# Metrics summed across two cortex workers: tests/integration/test_admin_listener.py
# (test_with_two_workers_each_serves_the_admin_listener_and_the_metrics_add_up).
