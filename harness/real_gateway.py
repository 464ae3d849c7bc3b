"""cortex in front of one real neuron (`neuraxis neuron serve`, vLLM on the
CPU): what a test needs when the engine itself is under test with settings
of its own (LoRA adapters, say) that the session's embedded stack does not
have. One engine start costs 30-100 s on the test machine: a module starts
it once.

The neuron's and cortex's command lines are built here once; the caller adds
only the flags its case is about. The session's embedded stack (`neuraxis
up`) is in stacks.py, cortex in front of simulated neurons in gateway.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.gateway import Cortex, SimNeuron, cortex
from harness.ports import free_port
from harness.procs import Proc
from harness.stacks import ENGINE_START_TIMEOUT_S, MODEL


@dataclass(frozen=True)
class RealGateway:
    cortex: Cortex
    neuron: SimNeuron  # a neuron's process and ports, whatever its engine

    @property
    def base_url(self) -> str:
        return self.cortex.base_url

    @property
    def admin_url(self) -> str:
        return self.cortex.admin_url


def real_neuron(log: Path, model: str, flags: Sequence[str]) -> SimNeuron:
    """`neuron serve --model MODEL` on the vLLM engine, on free ports (gRPC
    and metrics), with `flags`; not waited for."""
    port, metrics_port = free_port(), free_port()
    args = ["neuron", "serve", "--model", model, "--port", str(port)]
    args += ["--metrics-port", str(metrics_port), *flags]
    return SimNeuron(Proc(args, log), port, metrics_port)


@contextmanager
def real_gateway(
    logs: Path,
    name: str,
    *cortex_flags: str,
    model: str = MODEL,
    neuron_flags: Sequence[str] = (),
    timeout_s: float = ENGINE_START_TIMEOUT_S,
) -> Iterator[RealGateway]:
    """cortex (with `cortex_flags`) in front of one real neuron serving
    `model` (with `neuron_flags`), waited for until cortex is ready (the
    engine loaded); logs `<logs>/<name>-neuron.log` and `-cortex.log`;
    both stopped at the end, cortex first."""
    neuron = real_neuron(logs / f"{name}-neuron.log", model, neuron_flags)
    try:
        gateway = cortex(logs / f"{name}-cortex.log", [neuron.address], *cortex_flags)
        try:
            _wait_ready(gateway, neuron, timeout_s)
            yield RealGateway(gateway, neuron)
        finally:
            gateway.proc.stop()
    finally:
        neuron.proc.stop()


def _wait_ready(gateway: Cortex, neuron: SimNeuron, timeout_s: float) -> None:
    """Until cortex's /readyz answers 200; fails early, with the tail of the
    log of whichever exits first (cortex would wait on a dead neuron for
    the whole timeout), and with both tails past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in (neuron.proc, gateway.proc):
            if not proc.alive():
                raise RuntimeError(f"{proc.log_path.name} exited early:\n{proc.log_tail()}")
        try:
            if httpx.get(f"{gateway.base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    tails = "\n".join(f"{p.log_path.name}:\n{p.log_tail()}" for p in (neuron.proc, gateway.proc))
    raise RuntimeError(f"not ready after {timeout_s} s:\n{tails}")
