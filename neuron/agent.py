"""`neuraxis neuron agent`: a GPU host joining the cluster.

It detects the host's GPUs with NVML, refuses to go on when they are not of
the generation this neuron is installed for (the config's `generation`; a
mismatch names both), and then runs `ray start --block` as its child,
joining the Ray head with the generation as a node label and the GPU count
as its GPUs; the controller places replicas on the node.

The child leads its own process group and gets SIGTERM if the agent dies
(PR_SET_PDEATHSIG); SIGTERM, SIGINT and SIGHUP sent to the agent go on to it
(Ray drains the node and stops its processes). Once the node's raylet has
registered with the GCS (neuron/joined.py) the agent tells systemd READY=1
(`Type=notify`); it exits with the child's status, or 0 when the child ended
after the agent passed it a stop signal (Ray exits 1 after a drain).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

from axon.generations import (
    EXIT_WRONG_GPU,
    GENERATION_LABEL,
    Generation,
    UnsupportedGpuError,
)
from axon.logs import configure_logging
from axon.neuron_settings import NeuronSettings
from axon.process import (
    FIXED_RAY_PORT_ARGS,
    FIXED_REPLICA_PORTS,
    QUIET_RAY_ARGS,
    die_with_parent,
    ray_binary,
    ray_start_env,
    stop_process_group,
)
from axon.sdnotify import notify
from axon.tls import NEURON_PLAINTEXT_ENV, NEURON_TLS_ENV, allowed_plaintext
from neuron.gpu import Device, check_installed_for, detect, host_generation, load_nvml
from neuron.joined import node_alive, raylet_node_id

log = logging.getLogger("neuraxis.neuron")

# Signals the agent passes on to `ray start` (systemd's stop, Ctrl-C, a hang-up).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How often the agent looks whether the node has joined (and the child lives).
POLL_S = 0.5


def join_command(
    ray: str,
    address: str,
    generation: Generation,
    devices: list[Device],
    node_ip: str | None,
    fixed_ports: bool = False,
) -> list[str]:
    cmd = [
        ray,
        "start",
        "--address",
        address,
        "--block",
        *QUIET_RAY_ARGS,
        "--labels",
        f"{GENERATION_LABEL}={generation.value}",
        "--num-gpus",
        str(len(devices)),
    ]
    if node_ip:
        cmd += ["--node-ip-address", node_ip]
    if fixed_ports:
        cmd += FIXED_RAY_PORT_ARGS
    return cmd


def replica_tls_env(settings: NeuronSettings) -> dict[str, str]:
    """The replicas' neurons inherit Ray's environment and read their
    settings from it: this host's TLS files become theirs (absolute:
    a replica runs in another directory), and so does its plaintext setting."""
    if settings.tls is None:
        return {NEURON_PLAINTEXT_ENV: "true"} if settings.plaintext else {}
    files = (settings.tls.ca, settings.tls.cert, settings.tls.key)
    return {name: str(path.absolute()) for name, path in zip(NEURON_TLS_ENV, files, strict=True)}


def replica_tracing_env(settings: NeuronSettings) -> dict[str, str]:
    """This host's tracing settings become its replicas' (empty: no tracing)."""
    if not settings.otlp_endpoint:
        return {}
    return {
        "NEURAXIS_NEURON_OTLP_ENDPOINT": settings.otlp_endpoint,
        "NEURAXIS_NEURON_OTLP_PROTOCOL": settings.otlp_protocol,
        "NEURAXIS_NEURON_TRACE_SAMPLE_RATIO": str(settings.trace_sample_ratio),
    }


def run_agent(settings: NeuronSettings) -> int:
    configure_logging(settings.log_format, settings.log_level)
    if not settings.ray_address:
        raise SystemExit("neuron agent: set ray_address (the Ray head's host:port) to join")
    if settings.tls is not None:
        # Here, not in each replica the controller starts: a host whose TLS
        # files were not copied yet stops at once, naming the file (exit 2).
        settings.tls.read()
    try:
        devices = detect(load_nvml())
        generation = host_generation(devices)
        if settings.generation != "auto":
            check_installed_for(Generation(settings.generation), generation)
    except UnsupportedGpuError as e:
        print(f"neuron agent: {e}", file=sys.stderr)
        raise SystemExit(EXIT_WRONG_GPU) from None
    ray = ray_binary()
    cmd = join_command(
        ray, settings.ray_address, generation, devices, settings.node_ip, settings.ray_fixed_ports
    )
    if settings.ray_fixed_ports:
        os.environ.update(FIXED_REPLICA_PORTS)  # inherited by the replicas
    if settings.cache_dir is not None:
        # Replicas on this node prepare and load models from here.
        os.environ["NEURAXIS_CACHE_DIR"] = str(settings.cache_dir)
    os.environ.update(replica_tls_env(settings))
    os.environ.update(replica_tracing_env(settings))
    # The replicas listen on this node's address (Ray's guess without node_ip).
    link, node = "the listeners of this host's replicas", [settings.node_ip or ""]
    if settings.tls is None and not allowed_plaintext(
        log, "neuron agent", link, settings.plaintext, node
    ):
        raise SystemExit(2)
    names = ", ".join(sorted({d.name for d in devices})) or "no GPU"
    log.info(
        "joining the Ray cluster at %s as a %s node (%d GPUs: %s)",
        settings.ray_address,
        generation.value,
        len(devices),
        names,
    )
    address = settings.ray_address

    def joined(pgid: int) -> str | None:
        node_id = raylet_node_id(pgid)
        return node_id if node_id is not None and node_alive(address, node_id) else None

    return supervise(cmd, joined, f"joined the Ray cluster at {address}")


def supervise(
    cmd: list[str],
    joined: Callable[[int], str | None],
    what: str,
    poll_s: float = POLL_S,
) -> int:
    """Run `cmd` as a supervised child until it exits; READY=1 once
    `joined(the child's process group)` names the node. Returns the child's
    exit status (128 + N for a death by signal N), or 0 for a stop the agent
    was asked for and passed on."""
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(
        cmd, env=ray_start_env(), start_new_session=True, preexec_fn=die_with_parent
    )
    forwarded: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    started = time.monotonic()
    ready = False
    try:
        while child.poll() is None:
            if not ready and not forwarded:
                node_id = joined(child.pid)
                if node_id is not None:
                    ready = True
                    log.info("%s as node %s (%.1f s)", what, node_id, time.monotonic() - started)
                    notify("READY=1", f"STATUS={what} as node {node_id}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=poll_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        notify("STOPPING=1")
        # Whatever of Ray's processes outlives `ray start` goes with it.
        code = stop_process_group(child, timeout_s=0)
    return exit_status(code, asked_to_stop=bool(forwarded))


def exit_status(returncode: int, asked_to_stop: bool) -> int:
    """The agent's exit status for a child that ended with `returncode`
    (Popen's: negative for a death by signal)."""
    # Ray's `ray start --block` drains the node on SIGTERM and then exits
    # with status 1 (its raylet "exited unexpectedly"): after a stop the
    # agent passed on, that is the stop done, not a failure.
    if asked_to_stop and (returncode >= 0 or -returncode in FORWARDED):
        return 0
    if returncode < 0:
        return 128 - returncode
    if returncode == 0:
        log.error("ray start exited on its own")
    return returncode
