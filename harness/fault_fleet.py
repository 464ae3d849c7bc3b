"""A cortex in front of simulated neurons, each behind its own fault proxy
(harness/faultproxy.py), and the faults the fault tests (tests/faults/) and
the soak (bench/soak.py) inject into one neuron:

- through the proxy: `delay` (0.1 s a chunk each way: slow, yet inside the
  health timeout), `reset`, `blackhole`, `drip`;
- on the neuron's process: `sigstop` (SIGCONT clears it), `sigkill` (a new
  neuron on the same port clears it);
- in the engine: `engine_error` (the neuron is killed and started again
  with a sim engine that fails every request with INTERNAL before its
  first token; a healthy one clears it).

cortex runs with short deadlines (first token and idle 2 s, health checks
every 0.25 s with a 0.5 s timeout, ejections of 2-4 s), so that each fault
shows in seconds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from harness.faultproxy import FaultProxy
from harness.gateway import Cortex, cortex
from harness.ports import free_port
from harness.procs import Proc, cortex_metric

MODEL = "sim-faults"
IDLE_TIMEOUT_S = 2.0
Fault = Literal["none", "delay", "reset", "blackhole", "drip", "sigstop", "sigkill", "engine_error"]
FAULTS: tuple[Fault, ...] = get_args(Fault)
CORTEX_DEADLINES = [
    "--first-token-timeout-s", "2",
    "--idle-timeout-s", str(IDLE_TIMEOUT_S),
    "--request-timeout-s", "120",
    "--health-timeout-s", "0.5",
    "--poll-interval-s", "0.25",
    "--eject-base-s", "2",
    "--eject-max-s", "4",
]  # fmt: skip


@dataclass
class FaultFleet:
    base_url: str
    admin_url: str
    logs: Path
    neuron_args: list[str]  # the sim engine's flags, the same for each neuron
    ports: list[int]  # each neuron's own gRPC port
    proxies: list[FaultProxy]
    neurons: list[Proc] = field(default_factory=list)
    restarts: int = 0
    cortex_pid: int = 0

    @property
    def replicas(self) -> list[str]:
        """The neurons' addresses as cortex knows them: their proxies'."""
        return [f"127.0.0.1:{p.port}" for p in self.proxies]

    def start_neuron(self, i: int, extra: Sequence[str] = ()) -> Proc:
        args = ["neuron", "serve", "--engine", "sim", "--port", str(self.ports[i])]
        args += ["--served-id", MODEL, "--metrics-port", str(free_port()), *self.neuron_args]
        self.restarts += 1
        proc = Proc([*args, *extra], self.logs / f"neuron{i}-{self.restarts}.log")
        if i < len(self.neurons):
            self.neurons[i] = proc
        else:
            self.neurons.append(proc)
        return proc

    def inject(self, fault: Fault, i: int) -> None:
        if fault in ("delay", "reset", "blackhole", "drip"):
            self.proxies[i].mode = fault
        elif fault == "sigstop":
            os.kill(self.neurons[i].popen.pid, signal.SIGSTOP)
        elif fault == "sigkill":
            os.killpg(self.neurons[i].popen.pid, signal.SIGKILL)
            self.neurons[i].popen.wait(10)
        elif fault == "engine_error":
            os.killpg(self.neurons[i].popen.pid, signal.SIGKILL)
            self.neurons[i].popen.wait(10)
            self.start_neuron(i, ["--sim-ttft-s", "0", "--sim-fail-after-tokens", "0"])

    def clear(self, fault: Fault, i: int) -> None:
        if fault in ("delay", "reset", "blackhole", "drip"):
            self.proxies[i].mode = "pass"
        elif fault == "sigstop":
            os.kill(self.neurons[i].popen.pid, signal.SIGCONT)
        elif fault in ("sigkill", "engine_error"):
            if fault == "engine_error":
                self.neurons[i].stop()
            self.start_neuron(i)

    def metric(self, name: str, **labels: str) -> float:
        """One sample of cortex's /metrics (0 when absent)."""
        return cortex_metric(self.admin_url, name, **labels)

    def up(self) -> list[bool]:
        """Each replica's readiness as cortex sees it."""
        return [self.metric("neuraxis_replica_up", replica=r) == 1.0 for r in self.replicas]

    def routed(self, i: int) -> float:
        return self.metric(
            "neuraxis_routing_decisions_total", model=MODEL, replica=self.replicas[i]
        )

    def wait_all_up(self, timeout_s: float = 30) -> float:
        """Seconds until cortex has every replica in rotation again."""
        started = time.monotonic()
        while not all(self.up()):
            if time.monotonic() - started > timeout_s:
                raise AssertionError(f"replicas not back in {timeout_s} s: {self.up()}")
            time.sleep(0.1)
        return time.monotonic() - started


@contextmanager
def fault_fleet(
    logs: Path,
    neurons: int = 3,
    neuron_args: Sequence[str] = (),
    cortex_args: Sequence[str] = (),
) -> Iterator[FaultFleet]:
    """`neurons` sim neurons, each behind a fault proxy, and a cortex in
    front of the proxies (`cortex_args` after CORTEX_DEADLINES: the later
    flag wins)."""
    logs.mkdir(parents=True, exist_ok=True)
    ports = [free_port() for _ in range(neurons)]
    # A delay under the health timeout: a slow link, not a dead one.
    proxies = [FaultProxy(port, delay_s=0.1) for port in ports]
    fleet: FaultFleet | None = None
    front: Cortex | None = None
    try:
        port, admin_port = free_port(), free_port()
        base, admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
        fleet = FaultFleet(base, admin_url, logs, list(neuron_args), ports, proxies)
        for i in range(neurons):
            fleet.start_neuron(i)
        args = ["--model", MODEL, "--admin-port", str(admin_port), *CORTEX_DEADLINES]
        front = cortex(logs / "cortex.log", fleet.replicas, *args, *cortex_args, port=port)
        fleet.cortex_pid = front.proc.popen.pid
        front.wait_ready()
        fleet.wait_all_up()
        yield fleet
    finally:
        if front is not None:
            front.proc.stop()
        if fleet is not None:
            for proc in fleet.neurons:
                if proc.popen.poll() is None:
                    os.kill(proc.popen.pid, signal.SIGCONT)  # a stopped one cannot stop
                proc.stop()
        for proxy in proxies:
            proxy.close()
