"""Every benchmark in smoke mode (`--smoke`: a few requests, seconds), so a
change that breaks one fails `make test` instead of the next `make bench`.
Nothing here judges speed: a run passes when it exits 0 and prints its table.

The benchmarks that measure the real stack run as separate processes against
the session's `neuraxis up` (--base-url), the way `make bench` runs them but
without starting a second engine; the failover benchmark builds its own
simulated Ray cluster, and the routing-at-scale and gateway-capacity ones
their own farm of sim neurons (writing their tables and plots to a temporary
directory, so the plotting is exercised too).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.procs import REPO, child_env
from harness.stacks import Stack

SMOKE_TIMEOUT_S = 300
# The benchmarks with processes of their own that run in make test's stack
# lane all the same, evening out the two lanes' times (tests/conftest.py).
in_stack_lane = pytest.mark.lane("stack")


def _smoke(module: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, "--smoke", *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{module} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout


def _check_writes(out: str, tables: Sequence[str], folder: Path, files: Sequence[str]) -> None:
    """A benchmark's run printed each of `tables` and wrote `files` in `folder`."""
    for table in tables:
        assert table in out, out
    for name in files:
        assert (folder / name).is_file(), name


def _against(stack: Stack) -> list[str]:
    """The options that point a benchmark at the session's stack."""
    return ["--base-url", stack.base_url, "--admin-url", stack.admin_url]


@pytest.mark.parametrize(
    ("module", "table"),
    [
        ("bench.gateway_overhead", "| concurrency | path | TTFT p50 (ms) | output tokens/s |"),
        ("bench.embeddings_throughput", "| batch | direct gRPC (inputs/s) |"),
        ("bench.metrics_cost", "| cortex (concurrency 2) | TTFT p50 (ms) | output tokens/s |"),
        ("bench.responses_vs_chat", "| concurrency | API | TTFT p50 (ms) | output tokens/s |"),
        ("bench.tool_stream", "| case | first text (ms) | first tool-call delta (ms) |"),
        ("bench.routing", "| workload | policy | TTFT p50 (ms) | TTFT p90 (ms) |"),
        ("bench.seeded_streams", "| round | streams | finished | failed | seconds |"),
    ],
)
def test_benchmark_against_the_stack_runs(stack: Stack, module: str, table: str) -> None:
    out = _smoke(module, *_against(stack))
    assert table in out, out


def test_vs_vllm_benchmark_runs(stack: Stack, tmp_path: Path) -> None:
    # No vLLM server in a smoke run: side B is the session's stack again, so
    # the settings resolution, the streaming client, the CPU meter, the A/B
    # loop, the table and the plots all run in seconds.
    out = _smoke("bench.vs_vllm", *_against(stack), "--out", str(tmp_path / "v.json"))
    tables = (
        "| concurrency | output tokens/s | TTFT p50 (ms) |",
        "| max_num_seqs |",
        "| concurrency | neuraxis (ms) | vLLM API server (ms) | ratio | per run | target |",
    )
    _check_writes(out, tables, tmp_path, ("tokens_per_s.png", "vs_vllm.md"))


def test_profile_benchmark_runs(stack: Stack, tmp_path: Path) -> None:
    out = _smoke("bench.profile_stages", *_against(stack), "--out", str(tmp_path))
    tables = ("| process | stage | share | CPU µs / output token |",)
    _check_writes(out, tables, tmp_path, ("cortex.txt",))


@in_stack_lane
def test_failover_benchmark_runs() -> None:
    out = _smoke("bench.failover")
    assert "| actor killed | 1 |" in out, out


@in_stack_lane
def test_autoscale_benchmark_runs(tmp_path: Path) -> None:
    # Its own sim Ray cluster: a short trace on the autoscaled and fixed models.
    out = _smoke("bench.autoscale", "--out", str(tmp_path / "autoscale.json"))
    tables = ("| phase | model | requests | failed |", "replica-seconds: auto")
    files = ("autoscale.md", "autoscale_replicas.png", "autoscale.json")
    _check_writes(out, tables, tmp_path, files)


@in_stack_lane
def test_cold_start_benchmark_runs(tmp_path: Path) -> None:
    # Its own `neuraxis up --deployment` with a sim model at min_replicas 0,
    # woken once: the parts from the controller's status and the neuron's log.
    out = _smoke("bench.cold_start", "--out", str(tmp_path / "cold_start.json"))
    tables = ("| part (median of rounds) | seconds | share |", "| engine load |")
    _check_writes(out, tables, tmp_path, ("cold_start.md", "cold_start.json"))


def test_auth_cost_benchmark_runs() -> None:
    # Starts its own sim neuron and two cortexes (auth off and on).
    out = _smoke("bench.auth_cost")
    assert "| concurrency | auth + limits | TTFT p50 (ms) |" in out, out
    assert "µs of cortex CPU a request" in out, out
    assert "| admit + settle |" in out, out


def test_tracing_overhead_benchmark_runs(tmp_path: Path) -> None:
    # Starts its own OTLP receiver, sim neurons and cortexes (tracing off and on).
    out = _smoke("bench.tracing_overhead", "--out", str(tmp_path / "tracing_overhead.json"))
    assert "| off |" in out and "| ratio 1.0 |" in out, out
    assert "tracing off: " in out and "no OpenTelemetry object made" in out, out
    assert (tmp_path / "tracing_overhead.md").is_file()


def test_edge_stalls_benchmark_runs(tmp_path: Path) -> None:
    # Starts its own sim neuron and a cortex with auth required.
    out = _smoke("bench.edge_stalls", "--out", str(tmp_path / "edge_stalls.json"))
    for attack in ("idle", "keyless", "big_bodies", "big_answer", "unread_echo"):
        assert f"| {attack} |" in out, out
    assert "| keyless |" in out and "401: 1" in out, out
    assert (tmp_path / "edge_stalls.md").is_file()


def test_admission_benchmark_runs(tmp_path: Path) -> None:
    # Starts its own sim neuron and two cortexes (admission on and unlimited).
    out = _smoke("bench.admission", "--out", str(tmp_path / "admission.json"))
    files = ("admission.md", "admission_goodput.png", "admission.json")
    _check_writes(out, ("| admission |", "| unlimited |"), tmp_path, files)


def test_fairness_benchmark_runs(tmp_path: Path) -> None:
    # Starts its own sim neuron and two cortexes (fair queuing and FIFO).
    out = _smoke("bench.fairness", "--out", str(tmp_path / "fairness.json"))
    files = ("fairness.md", "fairness_quiet_ttft.png", "fairness_shares.png", "fairness.json")
    _check_writes(out, ("| quiet vs noisy, fair |", "| 1:3:6 | w6 |"), tmp_path, files)


def test_fairness_cost_benchmark_runs(tmp_path: Path) -> None:
    # Starts its own sim neuron and two cortexes (fair queuing and the
    # ledger on, FIFO and no ledger).
    out = _smoke("bench.fairness_cost", "--out", str(tmp_path / "fairness_cost.json"))
    tables = ("| concurrency | FIFO, no ledger: TTFT p50 (ms) |",)
    _check_writes(out, tables, tmp_path, ("fairness_cost.md", "fairness_cost.json"))


@in_stack_lane
def test_routing_sim_benchmark_runs(tmp_path: Path) -> None:
    out = _smoke("bench.routing_sim", "--out", str(tmp_path))
    tables = ("| groups | prefix_affinity |", "| hot | least_outstanding |")
    files = ("routing_sim.md", "routing_sim_ttft_cdf_groups.png", "routing_sim_share_hot.png")
    _check_writes(out, tables, tmp_path, files)


@in_stack_lane
def test_gateway_capacity_benchmark_runs(tmp_path: Path) -> None:
    out = _smoke("bench.gateway_capacity", "--out", str(tmp_path))
    files = ("gateway.md", "events_per_s.png", "added_itl_p99.png")
    _check_writes(out, ("| 2 workers | 4 |",), tmp_path, files)


@in_stack_lane
def test_token_stream_benchmark_runs(tmp_path: Path) -> None:
    # Its own sim neuron, a cortex per token stream: a second of load each.
    out = _smoke("bench.token_stream", "--out", str(tmp_path))
    _check_writes(out, ("| 4 | batched |",), tmp_path, ("token_stream.md", "token_stream.json"))


def test_batch_benchmark_runs(tmp_path: Path) -> None:
    # Its own sim neuron and cortex: 50 batch lines beside a second of load.
    out = _smoke("bench.batch", "--out", str(tmp_path / "batch.json"))
    tables = ("| interactive + batch |", "| batch lines | completed |")
    _check_writes(out, tables, tmp_path, ("batch.md", "batch.json"))


def test_store_benchmark_runs(tmp_path: Path) -> None:
    # Its own sim neuron, cortex and PostgreSQL server: 100 tokens, 1,000 rows.
    out = _smoke("bench.store", "--out", str(tmp_path / "store.json"))
    tables = ("| events after (compacted) |", "| postgres | 1000 |")
    _check_writes(out, tables, tmp_path, ("store.md",))


@in_stack_lane
def test_soak_runs(tmp_path: Path) -> None:
    # Three sim neurons behind fault proxies, 20 streams, three faults in ~20 s.
    out = _smoke("bench.soak", "--out", str(tmp_path / "soak.json"))
    tables = ("| failed before first token |", "| cut without terminal event | 0 |")
    _check_writes(out, tables, tmp_path, ("soak.md",))


def test_lora_benchmark_runs(tmp_path: Path) -> None:
    # Its own sim neurons (two per mode) and a cortex per mode.
    out = _smoke("bench.lora", "--out", str(tmp_path / "lora.json"))
    tables = ("| routing | requests | adapter loads / 100 req |", "| adapter-blind |")
    _check_writes(out, tables, tmp_path, ("lora.md", "lora.json"))
