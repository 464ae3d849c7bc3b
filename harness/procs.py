"""Starting and stopping the real processes the integration tests drive."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
import httpx

from axon.generations import GENERATION_LABEL
from axon.process import QUIET_RAY_ARGS, ray_binary, ray_start_env, stop_process_group
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from harness.ports import free_port
from harness.terminal import Terminal

REPO = Path(__file__).resolve().parent.parent


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # No model hub here: everything loads from the prepared cache.
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    # Tests start many cortexes side by side: one not given an admin port
    # takes a free one rather than the fixed default (flags still win).
    env["NEURAXIS_CORTEX_ADMIN_PORT"] = "0"
    return env


def cortex_metric(admin_url: str, name: str, **labels: str) -> float:
    """One sample of a cortex's /metrics (its admin listener), the first whose
    labels include `labels`; 0 when there is none."""
    text = httpx.get(f"{admin_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def admin_args() -> tuple[list[str], str]:
    """cortex's options for an admin listener on a free port, and its URL."""
    port = free_port()
    return ["--admin-port", str(port)], f"http://127.0.0.1:{port}"


class Proc:
    """A `neuraxis ...` child in its own process group, logging to a file."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        extra_env: dict[str, str] | None = None,
        terminal: bool = False,
    ) -> None:
        """With `terminal`, the child's output is a pseudo-terminal (what
        a person sees: `self.terminal`), copied to `log_path` as it comes."""
        self.log_path = log_path
        env = {**child_env(), **(extra_env or {})}
        self.terminal: Terminal | None = None
        stdin: int | None
        out: int | IO[bytes]
        with ExitStack() as files:
            if terminal:
                # Not under systemd, whatever runs the tests: its journal
                # variables would make the child log for the journal instead.
                for name in ("JOURNAL_STREAM", "INVOCATION_ID"):
                    env.pop(name, None)
                self.terminal = Terminal(log_path)
                stdin, out, err = subprocess.DEVNULL, self.terminal.slave, self.terminal.slave
            else:
                # The child writes through its own copy of the descriptor; ours
                # is closed at once, so no open file outlives a Proc never stopped.
                stdin, out = None, files.enter_context(open(log_path, "wb"))
                err = subprocess.STDOUT
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "neuraxis.cli", *args],
                stdin=stdin,
                stdout=out,
                stderr=err,
                env=env,
                cwd=REPO,
                start_new_session=True,
            )
        if self.terminal is not None:
            self.terminal.start()

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        code = stop_process_group(self.popen, sig, timeout)
        if self.terminal is not None:
            self.terminal.join()  # its last words copied to the log
        return code


def log_tail(log_path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a child's log, for a failure message."""
    text = log_path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_http_ok(
    popen: subprocess.Popen[bytes],
    url: str,
    timeout: float,
    log_path: Path,
    interval: float = 0.5,
) -> None:
    """Until `url` answers 200; fails early, with the tail of the child's
    log, if the child exits first, and with it too past `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"process exited early:\n{log_tail(log_path)}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"{url} not ready after {timeout} s:\n{log_tail(log_path)}")


def wait_http_ready(proc: Proc, url: str, timeout: float) -> None:
    wait_http_ok(proc.popen, url, timeout, proc.log_path)


@dataclass(frozen=True)
class Embedded:
    """A running `neuraxis up` on free ports."""

    proc: Proc
    base_url: str
    admin_url: str


def start_up(
    log_path: Path,
    state_dir: Path | None = None,
    extra: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    terminal: bool = False,
) -> Embedded:
    """`neuraxis up` (Ray, the controller, the replicas and cortex) on free
    ports, with `extra` options (e.g. --replicas 2), on a terminal if asked."""
    port, admin = free_port(), free_port()
    args = ["up", "--port", str(port), "--admin-port", str(admin), "--ray-port", str(free_port())]
    args += extra
    # Each stack keeps its state beside its log unless told otherwise, laid out
    # as $XDG_STATE_HOME/neuraxis would be (XDG_STATE_HOME=<log>-state).
    args += ["--state-dir", str(state_dir or up_state_dir(log_path))]
    # A first-token deadline with room for long prefills on 2 cores shared with
    # make test's other lane: a prompt at the model's whole 8,192-token context
    # took ~120 s, which the default (120 s) cut on 0a5fecd; the suite's longest
    # prompts now (Codex's first request, ~3,000 tokens) take a fraction of that.
    slow_prefill = {"NEURAXIS_CORTEX_DEADLINES__FIRST_TOKEN_S": "300"}
    proc = Proc(args, log_path, {**slow_prefill, **(extra_env or {})}, terminal)
    return Embedded(proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}")


def up_state_dir(log_path: Path) -> Path:
    return log_path.parent / f"{log_path.stem}-state" / "neuraxis"


def neuron_addresses(admin_url: str) -> dict[str, str]:
    """Each model's neuron (gRPC address), as cortex's service discovery
    (on its admin listener) lists them: replicas placed by Ray listen on
    ports of their choosing."""
    groups = httpx.get(f"{admin_url}/sd/neurons", timeout=10).json()
    return {g["labels"]["model"]: g["labels"]["replica"] for g in groups}


def engine_load(address: str) -> pb.LoadResponse:
    """A neuron's engine load (running and waiting requests), over gRPC."""
    with grpc.insecure_channel(address) as channel:
        load: pb.LoadResponse = neuron_stub(channel).Load(pb.LoadRequest(), timeout=5)
    return load


def neuron_stub(channel: Any) -> pb_grpc.NeuronStub:
    """A Neuron stub over a sync or asyncio channel (the untyped call to the
    generated constructor is excused here once)."""
    return pb_grpc.NeuronStub(channel)  # type: ignore[no-untyped-call]


def start_gpu_node(
    address: str, log_path: Path, generation: str = "ada"
) -> subprocess.Popen[bytes]:
    """A second Ray node joining the head at `address` as a GPU host's agent
    would start it (two logical GPUs labelled `generation`, replicas on
    127.0.0.1), in a session of its own; its output goes to `log_path`."""
    env = ray_start_env({**child_env(), "NEURAXIS_REPLICA_HOST": "127.0.0.1"})
    args = [ray_binary(), "start", "--address", address, "--block", *QUIET_RAY_ARGS]
    args += ["--num-cpus", "1"]
    args += ["--num-gpus", "2", "--labels", f"{GENERATION_LABEL}={generation}"]
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
