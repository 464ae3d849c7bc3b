"""cortex in front of simulated neurons, as the tests and the benchmarks start
it: `sim_neuron` (one `neuron serve --engine sim`), `cortex` (one gateway
on free ports, its admin listener included) and `sim_gateway`, both at once
and stopped together.

Each caller adds only the flags its case is about (caps, admission, auth,
a state directory, `--model`); the command lines themselves are built here
once. The stacks with real engines are in stacks.py, the fleets behind
fault proxies, in a Ray cluster or in one farm process in fault_fleet.py,
sim_cluster.py and sim_farm.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.polling import wait_until
from harness.ports import free_port
from harness.procs import Proc, cortex_metric, wait_http_ready

# How long a sim stack may take to answer: seconds on an idle machine, much
# more on two cores shared with a test run.
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Sim:
    """One simulated neuron to start: the model it serves and its flags
    (`--sim-itl-s`, `--sim-fail-after-tokens`, ...)."""

    served_id: str
    flags: Sequence[str] = ()


@dataclass(frozen=True)
class SimNeuron:
    proc: Proc
    port: int
    metrics_port: int

    @property
    def address(self) -> str:
        """Its gRPC address, as cortex's `--neuron` takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


@dataclass(frozen=True)
class Cortex:
    proc: Proc
    port: int
    admin_url: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, path: str = "/readyz", timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until `path` answers 200 (fails early if cortex exits)."""
        wait_http_ready(self.proc, self.base_url + path, timeout_s)


def sim_neuron(log: Path, sim: Sim) -> SimNeuron:
    """A sim neuron on free ports (gRPC and metrics), logging to `log`;
    not waited for: cortex waits for its neurons."""
    port, metrics_port = free_port(), free_port()
    args = ["neuron", "serve", "--engine", "sim", "--port", str(port)]
    args += ["--served-id", sim.served_id, "--metrics-port", str(metrics_port), *sim.flags]
    return SimNeuron(Proc(args, log), port, metrics_port)


def cortex(log: Path, neurons: Sequence[str], *flags: str, port: int | None = None) -> Cortex:
    """cortex on `port` (default: a free one) in front of the neurons at
    `neurons`, with an admin listener on a free port unless `flags` name one
    (then `admin_url` names that port, 0 included); not waited for."""
    port = port or free_port()
    args = ["cortex", "--port", str(port)]
    for address in neurons:
        args += ["--neuron", address]
    if "--admin-port" in flags:
        admin_port = int(flags[flags.index("--admin-port") + 1])
    else:
        admin_port = free_port()
        args += ["--admin-port", str(admin_port)]
    proc = Proc([*args, *flags], log)
    return Cortex(proc, port, f"http://127.0.0.1:{admin_port}")


@dataclass(frozen=True)
class SimGateway:
    cortex: Cortex
    neurons: list[SimNeuron] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.cortex.base_url

    @property
    def admin_url(self) -> str:
        return self.cortex.admin_url

    @property
    def neuron(self) -> SimNeuron:
        """The first (often the only) neuron."""
        return self.neurons[0]


@contextmanager
def sim_neurons(logs: Path, name: str, sims: Sequence[Sim]) -> Iterator[list[SimNeuron]]:
    """The sim neurons of `sims` (logs `<name>-neuron<i>.log`), stopped at
    the end."""
    with ExitStack() as stack:
        started: list[SimNeuron] = []
        for i, sim in enumerate(sims):
            neuron = sim_neuron(logs / f"{name}-neuron{i}.log", sim)
            stack.callback(neuron.proc.stop)
            started.append(neuron)
        yield started


@contextmanager
def running_cortex(
    log: Path,
    neurons: Sequence[str],
    *flags: str,
    ready: str | None = "/readyz",
    timeout_s: float = READY_TIMEOUT_S,
) -> Iterator[Cortex]:
    """`cortex(...)` waited for at `ready` (None: not waited for), stopped
    at the end."""
    started = cortex(log, neurons, *flags)
    try:
        if ready is not None:
            started.wait_ready(ready, timeout_s)
        yield started
    finally:
        started.proc.stop()


@contextmanager
def sim_gateway(
    logs: Path,
    name: str,
    *cortex_flags: str,
    sims: Sequence[Sim] = (),
    served_id: str = "sim-model",
    neuron_flags: Sequence[str] = (),
    extra_neurons: Sequence[str] = (),
    ready: str | None = "/readyz",
    timeout_s: float = READY_TIMEOUT_S,
) -> Iterator[SimGateway]:
    """cortex (with `cortex_flags`) in front of sim neurons: those of `sims`,
    or one serving `served_id` with `neuron_flags`; `extra_neurons` are more
    addresses for cortex (say, one where nothing listens). Logs go to
    `<logs>/<name>-...log`; cortex is waited for at `ready`; everything is
    stopped at the end, cortex first."""
    sims = sims or [Sim(served_id, neuron_flags)]
    with sim_neurons(logs, name, sims) as neurons:
        addresses = [n.address for n in neurons] + list(extra_neurons)
        log = logs / f"{name}-cortex.log"
        with running_cortex(log, addresses, *cortex_flags, ready=ready, timeout_s=timeout_s) as c:
            watched = not c.admin_url.endswith(":0") and "--no-metrics" not in cortex_flags
            if ready is not None and len(neurons) > 1 and watched:
                # /readyz wants one ready neuron a model; a test of several
                # wants them all in rotation. One started late on a loaded
                # machine missed cortex's first Info poll, and the first
                # requests had only the others (a 500 where a retry was due).
                in_rotation = wait_until(lambda: _all_up(c, neurons), timeout_s)
                assert in_rotation, f"not every sim neuron came up: {c.proc.log_tail()}"
            yield SimGateway(c, neurons)


def _all_up(cortex: Cortex, neurons: Sequence[SimNeuron]) -> bool:
    return all(
        cortex_metric(cortex.admin_url, "neuraxis_replica_up", replica=n.address) == 1.0
        for n in neurons
    )
