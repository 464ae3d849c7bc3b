"""`neuraxis neuron agent`: a GPU host joining the cluster.

It detects the host's GPUs with NVML, refuses to go on when they are not of
the generation this neuron is installed for (the config's `generation`; a
mismatch names both), and then becomes `ray start --block`, joining the Ray
head with the generation as a node label and the GPU count as its GPUs. It
stays in the foreground (the process is replaced by Ray's), so systemd
supervises it; the controller places replicas on the node.
"""

from __future__ import annotations

import logging
import os
import sys

from neuraxis.core.generations import (
    EXIT_WRONG_GPU,
    GENERATION_LABEL,
    Generation,
    UnsupportedGpuError,
)
from neuraxis.core.logs import configure_logging
from neuraxis.core.neuron_settings import NeuronSettings
from neuraxis.core.process import FIXED_RAY_PORT_ARGS, FIXED_REPLICA_PORTS, ray_binary
from neuraxis.core.tls import NEURON_TLS_ENV
from neuron.gpu import Device, check_installed_for, detect, host_generation, load_nvml

log = logging.getLogger("neuraxis.neuron")


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
        "--disable-usage-stats",
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
    a replica runs in another directory)."""
    if settings.tls is None:
        return {}
    files = (settings.tls.ca, settings.tls.cert, settings.tls.key)
    return {name: str(path.absolute()) for name, path in zip(NEURON_TLS_ENV, files, strict=True)}


def run_agent(settings: NeuronSettings) -> int:
    configure_logging(settings.log_format, settings.log_level)
    if not settings.ray_address:
        raise SystemExit("neuron agent: set ray_address (the Ray head's host:port) to join")
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
    names = ", ".join(sorted({d.name for d in devices})) or "no GPU"
    log.info(
        "joining the Ray cluster at %s as a %s node (%d GPUs: %s)",
        settings.ray_address,
        generation.value,
        len(devices),
        names,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(ray, cmd)
    return 0  # not reached: execv replaced this process
