"""The real stacks the integration tests and the benchmark smoke runs share:
the embedded default (`neuraxis up`: a local Ray, the controller, vLLM CPU
replicas of SmolLM2 and MiniLM, and cortex) and a cortex in front of
simulated neurons for failure paths. The session fixtures that start them
once are in tests/conftest.py; this module holds what tests import.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from openai import OpenAI

from harness.gateway import Sim, sim_gateway
from harness.ports import free_port
from harness.procs import (
    Proc,
    neuron_addresses,
    start_up,
    up_state_dir,
    wait_http_ready,
)
from harness.terminal import Terminal

MODEL = "smollm2-135m-instruct"
EMBEDDING_MODEL = "all-minilm-l6-v2"
ENGINE_START_TIMEOUT_S = 600
# The shared stack's context length (`up --max-model-len`): SmolLM2's own.
# A smaller one would make the truncation case's prefill seconds instead of
# ~125 s, but the Codex CLI's first request (its instructions and tools)
# needs more than 2,048 tokens (test_codex: context_length_exceeded).
CONTEXT = 8192
# cortex's graceful shutdown on the shared stack: short, so that a stream
# which would run on for minutes is still open when it runs out (the last
# test's Ctrl-C: tests/integration/test_embedded_shutdown.py).
SHUTDOWN_GRACE_S = 2


# Every client a test made, closed when the test ends (tests/conftest.py): a
# client left to the garbage collector closes its sockets in whatever order
# the collector finalises the cycle, and an unclosed socket is a
# ResourceWarning, raised later in some other test.
_made: list[OpenAI] = []


def strict_client(base_url: str) -> OpenAI:
    """The judge of wire-exactness: the pinned SDK in strict validation mode."""
    client = OpenAI(
        base_url=f"{base_url}/v1",
        api_key="unused",
        max_retries=0,
        _strict_response_validation=True,
    )
    _made.append(client)
    return client


def close_clients() -> None:
    """Close the clients made since the last call."""
    while _made:
        _made.pop().close()


@dataclass
class Endpoints:
    """What every stack offers a test: cortex's API and admin listeners."""

    base_url: str
    admin_url: str

    def client(self) -> OpenAI:
        return strict_client(self.base_url)


@dataclass
class Stack(Endpoints):
    neuron_address: str
    embedding_address: str
    proc: Proc
    state_dir: Path

    @property
    def terminal(self) -> Terminal:
        """What `up` printed, as a person at its terminal saw it."""
        assert self.proc.terminal is not None
        return self.proc.terminal


@contextmanager
def embedded_stack(logs_dir: Path) -> Iterator[Stack]:
    """`neuraxis up` as a person runs it: on a terminal (so its console is
    the one test_console.py reads; cortex's JSON logs are then not printed)."""
    log = logs_dir / "up.log"
    grace = {"NEURAXIS_CORTEX_SHUTDOWN_GRACE_S": str(SHUTDOWN_GRACE_S)}
    up = start_up(log, extra=["--max-model-len", str(CONTEXT)], extra_env=grace, terminal=True)
    try:
        wait_http_ready(up.proc, f"{up.base_url}/readyz", ENGINE_START_TIMEOUT_S)
        neurons = neuron_addresses(up.admin_url)
        yield Stack(
            base_url=up.base_url,
            admin_url=up.admin_url,
            neuron_address=neurons[MODEL],
            embedding_address=neurons[EMBEDDING_MODEL],
            proc=up.proc,
            state_dir=up_state_dir(log),
        )
    finally:
        up.proc.stop()


@dataclass
class SimStack(Endpoints):
    healthy_model: str
    failing_model: str
    crashing_model: str


@contextmanager
def simulated_stack(logs_dir: Path) -> Iterator[SimStack]:
    """cortex with three simulated neurons: one healthy, one whose engine fails
    after three tokens, one that fails before the first token; plus an address
    where nothing listens (a dead neuron) for a configured model."""
    sims = [
        Sim("sim-ok"),
        Sim("sim-midstream-fail", ["--sim-fail-after-tokens", "3"]),
        Sim("sim-crash", ["--sim-fail-after-tokens", "0"]),
    ]
    dead = f"127.0.0.1:{free_port()}"
    models = ["--model", "sim-ok", "--model", "sim-dead"]
    # /readyz stays 503 (sim-dead never comes); wait for the live models.
    with sim_gateway(
        logs_dir, "sim", *models, sims=sims, extra_neurons=[dead], ready=None
    ) as running:
        for sim in sims:
            running.cortex.wait_ready(f"/v1/models/{sim.served_id}")
        yield SimStack(
            running.base_url, running.admin_url, "sim-ok", "sim-midstream-fail", "sim-crash"
        )
