"""Request caps with real processes: a cortex with small caps in front of a
simulated neuron (4,096-token context). Every cap answered with a 400 naming
the parameter, before anything reaches the neuron (its request count does
not move); the embeddings caps against the real stack's MiniLM, at their
defaults."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.gateway import sim_gateway
from harness.stacks import EMBEDDING_MODEL, Stack

MODEL = "sim-caps"
CAPS = {
    "--max-messages": 3,
    "--max-tools": 2,
    "--max-stop-sequences": 2,
    "--max-schema-bytes": 300,
    "--max-completion-prompts": 3,
    "--max-prompts-times-n": 4,
    "--max-background-per-tenant": 1,
}


@dataclass
class Gateway:
    base_url: str
    metrics_url: str  # the neuron's, to see that nothing reached it


@pytest.fixture(scope="module")
def gateway(logs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cortex_args = ["--model", MODEL, "--state-dir", str(tmp_path_factory.mktemp("caps-state"))]
    for flag, value in CAPS.items():
        cortex_args += [flag, str(value)]
    with sim_gateway(
        logs_dir, "caps", *cortex_args, served_id=MODEL, neuron_flags=["--sim-itl-s", "0.05"]
    ) as running:
        yield Gateway(running.base_url, running.neuron.metrics_url)


def _neuron_requests(gateway: Gateway) -> float:
    """Generate calls the neuron has handled (its own counter)."""
    text = httpx.get(gateway.metrics_url).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("neuraxis_neuron_grpc_requests_total") and 'method="Generate"' in line
    )


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _tool(name: str, size: int = 0) -> dict[str, Any]:
    properties = {f"p{i}": {"type": "string"} for i in range(size)}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


SCHEMA = {"type": "object", "properties": {f"field{i}": {"type": "string"} for i in range(20)}}

# (path, body, the param the 400 must name)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("chat/completions", {"messages": [_user("a")] * 4}, "messages"),
    (
        "chat/completions",
        {"messages": [_user("a")], "tools": [_tool(f"t{i}") for i in range(3)]},
        "tools",
    ),
    ("chat/completions", {"messages": [_user("a")], "stop": ["x", "y", "z"]}, "stop"),
    ("chat/completions", {"messages": [_user("a")], "tools": [_tool("big", 20)]}, "tools"),
    (
        "chat/completions",
        {
            "messages": [_user("a")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": SCHEMA},
            },
        },
        "response_format.json_schema.schema",
    ),
    ("chat/completions", {"messages": [_user("a")], "max_tokens": 5000}, "max_tokens"),
    (
        "chat/completions",
        {"messages": [_user("a")], "max_completion_tokens": 5000},
        "max_completion_tokens",
    ),
    ("completions", {"prompt": ["a", "b", "c", "d"]}, "prompt"),
    ("completions", {"prompt": ["a", "b", "c"], "n": 2}, "n"),
    ("completions", {"prompt": "a", "max_tokens": 5000}, "max_tokens"),
    ("responses", {"input": [_user("a")] * 4}, "input"),
    ("responses", {"input": "a", "max_output_tokens": 5000}, "max_output_tokens"),
    (
        "responses",
        {"input": "a", "text": {"format": {"type": "json_schema", "name": "s", "schema": SCHEMA}}},
        "text.format.schema",
    ),
]


@pytest.mark.parametrize(("path", "body", "param"), CASES)
def test_each_cap_is_a_400_naming_its_param_before_any_work(
    gateway: Gateway, path: str, body: dict[str, Any], param: str
) -> None:
    before = _neuron_requests(gateway)
    r = httpx.post(f"{gateway.base_url}/v1/{path}", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert _neuron_requests(gateway) == before


def test_within_the_caps_requests_are_served(gateway: Gateway) -> None:
    before = _neuron_requests(gateway)
    body = {"model": MODEL, "messages": [_user("a")] * 3, "stop": ["x", "y"], "max_tokens": 2}
    body["tools"] = [_tool("t0"), _tool("t1")]
    r = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.post(
        f"{gateway.base_url}/v1/completions",
        json={"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 2},
        timeout=30,
    )
    assert r.status_code == 200 and len(r.json()["choices"]) == 4, r.text
    # The counter the caps' test reads does count what reaches the neuron.
    assert _neuron_requests(gateway) >= before + 3


def test_background_responses_per_tenant_are_capped(gateway: Gateway) -> None:
    base = f"{gateway.base_url}/v1/responses"
    long = {"model": MODEL, "input": "a", "background": True, "max_output_tokens": 400}
    first = httpx.post(base, json=long, timeout=30)
    assert first.status_code == 200, first.text
    try:
        second = httpx.post(base, json=long, timeout=30)
        assert second.status_code == 400, second.text
        assert second.json()["error"]["param"] == "background"
    finally:
        httpx.post(f"{base}/{first.json()['id']}/cancel", timeout=30)
    # Once the first has ended, another may start.
    r = httpx.post(base, json={**long, "max_output_tokens": 2}, timeout=30)
    assert r.status_code == 200, r.text


def test_embedding_inputs_are_capped(stack: Stack) -> None:
    url = f"{stack.base_url}/v1/embeddings"
    many = httpx.post(url, json={"model": EMBEDDING_MODEL, "input": ["a"] * 2049}, timeout=30)
    assert many.status_code == 400 and many.json()["error"]["param"] == "input", many.text
    # 9 MiB of text, under the 16 MiB body limit, over the 8 MiB input cap.
    large = ["x" * (3 * 1024 * 1024)] * 3
    big = httpx.post(url, json={"model": EMBEDDING_MODEL, "input": large}, timeout=60)
    assert big.status_code == 400, big.text
    assert big.json()["error"]["param"] == "input" and "bytes" in big.json()["error"]["message"]
