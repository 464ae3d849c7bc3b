"""Metrics, service discovery, alert rules, the dashboard and JSON logs,
checked against a real Prometheus scraping the running embedded stack."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness import services
from harness.ports import free_port
from harness.procs import REPO
from harness.stacks import MODEL, Stack

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
        names |= {name + suffix for suffix in suffixes.get(kind, [""])}
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


def test_json_logs_carry_the_request_id_and_no_text(stack: Stack) -> None:
    marker = f"zebra-{uuid.uuid4().hex}"
    r = httpx.post(
        f"{stack.base_url}{CHAT}",
        json={"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": marker}]},
        timeout=60,
    )
    request_id = r.headers["x-request-id"]
    assert request_id == r.json()["id"]
    # cortex logs to `up`'s output; the replicas' neurons to their own files.
    log_paths = [stack.proc.log_path, *sorted((stack.state_dir / "replicas").glob("*.log"))]
    assert len(log_paths) == 3
    deadline = time.monotonic() + 10
    lines: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len({x["logger"] for x in lines}) < 2:
        time.sleep(0.2)
        lines = [
            json.loads(line)
            for path in log_paths
            for line in path.read_text(errors="replace").splitlines()
            if line.startswith("{") and request_id in line
        ]
    loggers = {line["logger"] for line in lines}
    assert {"neuraxis.cortex.requests", "neuraxis.neuron"} <= loggers
    assert all(line["request_id"] == request_id for line in lines)
    assert not any(marker in p.read_text(errors="replace") for p in log_paths)


# Metrics summed across two cortex workers: tests/integration/test_admin_listener.py
# (test_with_two_workers_each_serves_the_admin_listener_and_the_metrics_add_up).
