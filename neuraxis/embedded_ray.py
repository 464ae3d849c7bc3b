"""`neuraxis up` on a local Ray: a Ray head (labelled `cpu`, with a token
made for the run) and cortex in cluster mode with the embedded deployment
spec; cortex starts the controller, which places the replicas (vLLM on the
CPU) as Ray actors. On Ctrl-C or SIGTERM: cortex stops, the replicas drain
through the controller (`neuraxis cluster stop`), then Ray stops.

A cortex that dies is started again by the supervisor with the same
command line: it joins the same Ray with the same token and adopts the
running controller, whose replicas (detached actors) kept serving.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from axon.generations import GENERATION_LABEL
from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from axon.process import stop_process_group
from cortex.cluster.spec import parse_spec
from cortex.config import default_state_dir
from neuraxis.console import auth_line, print_banner, say, warn
from neuraxis.embedded import (
    EMBEDDED_CLUSTER_FILE,
    EmbeddedOptions,
    cortex_command,
    cortex_logging,
    tracing_env,
)
from neuraxis.replica_watch import ReplicaWatch
from neuraxis.supervisor import STOP_TIMEOUT_S, run_until_stopped, spawn, supervise_cortex


def run_on_ray(options: EmbeddedOptions, cache_dir: Path, spec_text: str) -> int:
    """`spec_text`: the deployment spec to run (neuraxis/embedded_deployment.py)."""
    from cortex.cluster.head import start_head, wait_for_head

    port = options.ray_port or _free_port()
    address = f"127.0.0.1:{port}"
    # Anyone who can reach a Ray cluster can run code on it: this one takes
    # only processes that know a token made for this run.
    token = secrets.token_hex(32)
    state_dir = options.state_dir or default_state_dir()
    env = _children_env(options, token, cache_dir, state_dir)
    workdir = Path(tempfile.mkdtemp(prefix="neuraxis-up-"))
    spec = workdir / "deployment.toml"
    spec.write_text(spec_text)
    # `neuraxis status` with no arguments finds this cluster here.
    marker = state_dir / EMBEDDED_CLUSTER_FILE
    cortex_cmd = cortex_command(options, "--ray-address", address, "--deployment", str(spec))
    supervisor = supervise_cortex(cortex_cmd, env, options.base_url)

    def run() -> int:
        head_log = workdir / "ray-head.log"
        started = time.monotonic()
        head = start_head(port, "127.0.0.1", {GENERATION_LABEL: "cpu"}, env, head_log)
        supervisor.add("the Ray head", head)
        try:
            wait_for_head(address, head)
        except RuntimeError as e:
            tail = head_log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"neuraxis: {e}\n{tail}") from None
        say(f"Ray started on {address} in {time.monotonic() - started:.1f} s")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch(mode=0o600)
        marker.write_text(json.dumps({"address": address, "token": token}))
        say(
            f"starting cortex on {options.host}:{options.port}; it places {_placed(options)} "
            f"on Ray (neuron logs in {state_dir / 'replicas'})"
        )
        say(auth_line(options))
        supervisor.start_cortex()
        watch = ReplicaWatch(address, token)
        try:
            supervisor.wait_ready(tick=watch.poll)
            watch.poll(now=True)  # the last replica's "ready" line
        finally:
            watch.close()
        # The spec's first model (a --deployment's), else the bundled chat model.
        models = parse_spec(spec_text, "up").models
        print_banner(options, models[0].id if models else DEFAULT_CHAT_MODEL)
        return supervisor.serve()

    def stop() -> None:
        # cortex first (no new requests), then the replicas drain, then Ray.
        children = supervisor.children()
        for child in reversed(children):
            if child is children[0] and child.poll() is None:
                _drain_replicas(address, env, workdir / "cluster-stop.log")
            stop_process_group(child, timeout_s=STOP_TIMEOUT_S)
        shutil.rmtree(workdir, ignore_errors=True)
        marker.unlink(missing_ok=True)

    return run_until_stopped(run, stop)


def _placed(options: EmbeddedOptions) -> str:
    """What `up` says cortex places."""
    engines = "simulated engines" if options.engine == "sim" else "vLLM CPU"
    if options.deployment is not None:
        return f"the models of {options.deployment} ({engines})"
    if options.engine == "sim":
        return f"{DEFAULT_CHAT_MODEL} (x{options.replicas}, {engines})"
    return f"{DEFAULT_CHAT_MODEL} (x{options.replicas}) and {DEFAULT_EMBEDDING_MODEL} ({engines})"


def _children_env(
    options: EmbeddedOptions, token: str, cache_dir: Path, state_dir: Path
) -> dict[str, str]:
    """The environment of the head (and so of every replica) and of cortex."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    env["NEURAXIS_CACHE_DIR"] = str(cache_dir)
    env["NEURAXIS_REPLICA_HOST"] = "127.0.0.1"
    env["NEURAXIS_REPLICA_LOG_DIR"] = str(state_dir / "replicas")
    return env | cortex_logging(options) | tracing_env(options)


def _drain_replicas(address: str, env: dict[str, str], log_path: Path) -> None:
    """Let the controller drain and stop the replicas (in a child process, as
    a Ray driver with the run's token), so that the engines shut down cleanly.
    What Ray says meanwhile goes to a file; the console hears of a failure."""
    with open(log_path, "wb") as log:
        child = spawn(["cluster", "stop", "--address", address], env, log)
    try:
        code = child.wait(timeout=STOP_TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        code = stop_process_group(child, timeout_s=5)
    if code != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
        warn(f"could not drain the replicas (code {code}): {' '.join(tail)}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
