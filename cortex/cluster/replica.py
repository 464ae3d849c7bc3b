"""A neuron replica as a Ray actor.

The actor holds the GPUs Ray gave it and runs `neuraxis neuron serve` as its
child on the same node, on free ports of the node's address: the neuron keeps
its own process (its engine, its metrics port, its drain on SIGTERM) exactly
as in static mode, and Ray's CUDA_VISIBLE_DEVICES reaches it through the
environment. The child is told by the kernel to stop when the actor dies
(PR_SET_PDEATHSIG), so killing the actor or losing its node takes the neuron
with it; and when the neuron ends, what is left of its process group is killed.

The actor is detached and outlives the controller that created it; it keeps
its own record (`describe`: model, serial, node, the neuron's address and
pid) so that the next controller can adopt it without restarting anything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from axon.process import die_with_parent, kill_group_when_exits, stop_process_group
from axon.tls import tls_from_env
from cortex.cluster.backend import ReplicaStartError
from cortex.routing.client import NeuronClient, channel_credentials

LOG_TAIL_BYTES = 4000


def _free_port(host: str, env: str, taken: int = 0) -> int:
    """A free port of the range in environment variable `env` ("first-last",
    set by the host agent for firewalled hosts), or any free port."""
    first, _, last = os.environ.get(env, "").partition("-")
    candidates = range(int(first), int(last) + 1) if first and last else [0]
    for port in candidates:
        if taken and port == taken:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise ReplicaStartError(f"no free port left in {env}={os.environ[env]}")


# Where replicas listen instead of the node's address: 127.0.0.1 for a
# cluster on one machine (`neuraxis up`, tests), so that nothing but local
# processes can reach the neurons. Inherited from the node's environment.
HOST_ENV = "NEURAXIS_REPLICA_HOST"
# Where each replica's neuron writes its log (<replica id>.log); default: a
# directory under the temporary directory. Inherited from the node too.
LOG_DIR_ENV = "NEURAXIS_REPLICA_LOG_DIR"


def _node_ip() -> str:
    """The address the node joined the cluster with, where the others reach
    it (Ray replaces a loopback --node-ip-address with the host's)."""
    if os.environ.get(HOST_ENV):
        return os.environ[HOST_ENV]
    here = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == here:
            return str(node["NodeManagerAddress"])
    return str(ray.util.get_node_ip_address())


class Replica:
    def __init__(self, replica_id: str, model: str = "", serial: int = 0) -> None:
        self.replica_id = replica_id
        self._model = model
        self._serial = serial
        self._created = time.time()
        self._child: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        # The neuron's addresses, once it reported SERVING.
        self._started: dict[str, Any] | None = None

    async def describe(self) -> dict[str, Any]:
        """This replica's own record, for a controller that did not start it."""
        return {
            **(await self.where()),
            "replica_id": self.replica_id,
            "model": self._model,
            "serial": self._serial,
            "created": self._created,
            "started": self._started,
        }

    async def where(self) -> dict[str, Any]:
        """The node this actor was placed on (answers as soon as it is placed)."""
        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "host": _node_ip(),
            "labels": dict(context.get_node_labels()),
        }

    async def start(self, settings_env: dict[str, str], timeout_s: float) -> dict[str, Any]:
        """Start the neuron with its settings (`NEURAXIS_NEURON_*` variables,
        over the node's environment) and return its addresses once it
        reports SERVING."""
        host = _node_ip()
        port = _free_port(host, "NEURAXIS_REPLICA_PORTS")
        metrics_port = _free_port(host, "NEURAXIS_REPLICA_METRICS_PORTS", taken=port)
        log_dir = Path(
            os.environ.get(LOG_DIR_ENV) or Path(tempfile.gettempdir()) / "neuraxis" / "replicas"
        )
        log_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = log_dir / f"{self.replica_id}.log"
        cmd = [
            sys.executable,
            "-m",
            "neuraxis.cli",
            "neuron",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
            "--metrics-port",
            str(metrics_port),
        ]
        env = {**os.environ, **settings_env}
        # Ray sets one OpenMP thread for its workers; the engine sizes its own.
        env.pop("OMP_NUM_THREADS", None)
        with open(self._log_path, "wb") as log:
            # Started from the actor's event-loop thread, which lives as long
            # as the actor: the death signal is tied to the starting thread.
            self._child = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        # However the neuron ends (SIGKILL included), its engine core goes too.
        kill_group_when_exits(self._child)
        address = f"{host}:{port}"
        # Over mutual TLS the neuron's own files (the host agent put them in
        # the environment) make the client: its certificate is a client's too.
        files = tls_from_env(env)
        client = NeuronClient(address, channel_credentials(files) if files else None)
        deadline = time.monotonic() + timeout_s
        try:
            while not await client.serving(timeout=2.0):
                if self._child.poll() is not None:
                    raise ReplicaStartError(
                        f"the neuron exited with code {self._child.returncode} during start-up: "
                        f"{self._log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise ReplicaStartError(
                        f"the neuron was not ready after {timeout_s:.0f} s: {self._log_tail()}"
                    )
                await asyncio.sleep(0.5)
        finally:
            await client.close()
        self._started = {
            "address": address,
            "metrics_port": metrics_port,
            "pid": self._child.pid,
            "log": str(self._log_path),
            "at": time.time(),
        }
        return self._started

    async def check(self) -> dict[str, Any]:
        """Whether the neuron process is still running."""
        code = self._child.poll() if self._child else None
        return {"running": self._child is not None and code is None, "exit_code": code}

    async def drain(self, timeout_s: float) -> int | None:
        """Stop the neuron with SIGTERM: it stops taking calls and lets the
        in-flight ones finish (up to its drain timeout) before it exits."""
        if self._child is None:
            return None
        child = self._child
        return await asyncio.to_thread(stop_process_group, child, signal.SIGTERM, timeout_s)

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        data = self._log_path.read_bytes()[-LOG_TAIL_BYTES:]
        return data.decode(errors="replace").strip() or "(empty log)"


ReplicaActor = ray.remote(Replica)
