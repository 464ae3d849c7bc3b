"""`neuraxis up`: the embedded default on one machine.

Prepares the bundled models, starts a local Ray head (labelled `cpu`, with a
fresh auth token) and cortex in cluster mode with a deployment spec of
`--replicas` chat replicas (one by default) and one embedding replica, routed
by cortex's `--routing` policy; cortex starts the controller, which places
the replicas (vLLM on the CPU) as Ray actors. It waits until cortex is ready,
prints how to call it, and on Ctrl-C or SIGTERM stops cortex, drains the
replicas through the controller and stops Ray. With --static it starts the
two neurons directly instead, without Ray.

Each child runs in its own process group (so the terminal's Ctrl-C reaches
only this supervisor, which stops the children in order) and is told by the
kernel to exit if the supervisor dies without cleaning up.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cortex.config import default_state_dir
from cortex.routing.factory import PolicyName
from neuraxis.app.progress import Level, StartProgress
from neuraxis.core.generations import GENERATION_LABEL
from neuraxis.core.logs import LogFormat, resolve_format
from neuraxis.core.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from neuraxis.core.process import die_with_parent, stop_process_group
from neuron.models.bundled import BUNDLED_MODELS
from neuron.models.prepare import PrepareError, default_cache_dir, is_prepared, prepare_all

READY_TIMEOUT_S = 900.0
# In the state directory while `up` runs: the local Ray's address and token.
EMBEDDED_CLUSTER_FILE = "embedded-cluster.json"
STOP_TIMEOUT_S = 40.0
# How often `up` starts cortex when it is killed by a signal while starting.
CORTEX_START_ATTEMPTS = 3


class EmbeddedOptions(BaseModel):
    """`neuraxis up`'s options (generated from these fields, as the services'
    are from their settings: neuraxis/app/options.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="cortex HTTP address")
    auth: Literal["off", "required"] = Field(
        "off",
        description="required: API keys (`neuraxis keys create` with the same --state-dir) "
        "on every /v1 request; off: anyone who reaches cortex may use it, so it stays on a "
        "loopback address",
    )
    port: int = Field(8080, description="cortex HTTP port")
    admin_port: int = Field(
        9180, description="cortex admin port, on 127.0.0.1: /metrics and /sd/neurons"
    )
    neuron_port: int = Field(50051, description="chat neuron gRPC port")
    embedding_port: int = Field(50052, description="embedding neuron gRPC port")
    neuron_metrics_port: int = Field(9400, description="chat neuron metrics port")
    embedding_metrics_port: int = Field(9401, description="embedding neuron metrics port")
    cache_dir: Path | None = Field(None, description="model cache (default ~/.cache/neuraxis)")
    state_dir: Path | None = Field(
        None, description="state: the Responses store (default ~/.local/state/neuraxis)"
    )
    kv_cache_gib: int = Field(1, description="KV cache size in whole GiB")
    replicas: int = Field(
        1, ge=1, le=16, description="replicas of the chat model (more than one: not with --static)"
    )
    routing: PolicyName | None = Field(
        None, description="cortex's routing policy (default: cortex's own default)"
    )
    max_model_len: int | None = Field(None, description="context length (default: the model's)")
    static: bool = Field(
        False, description="start the neurons directly, without Ray (the --*-port options apply)"
    )
    ray_port: int = Field(0, description="the local Ray head's port (0: a free one)")
    verbose: bool = Field(
        False,
        description="every log line on the console; otherwise, on a terminal, the progress, "
        "warnings and errors only",
    )
    log_format: LogFormat = Field(
        "auto",
        description="log lines as text or JSON (auto: text on a terminal, JSON otherwise "
        "and under systemd)",
    )

    @model_validator(mode="after")
    def _replicas_on_ray(self) -> EmbeddedOptions:
        # --static places its neurons on the fixed --*-port options; several
        # chat replicas are Ray's to place, on ports of their choosing.
        if self.static and self.replicas > 1:
            raise ValueError("--replicas above 1 needs Ray: leave out --static")
        return self


class _StopRequestedError(Exception):
    pass


def run_embedded(options: EmbeddedOptions) -> int:
    cache_dir = options.cache_dir or default_cache_dir()
    models = [DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL]
    started = time.monotonic()
    # Fetching and converting take a while and say so; a cache hit is one line.
    work = not all(is_prepared(cache_dir, BUNDLED_MODELS[m]) for m in models)
    try:
        prepare_all(cache_dir, models, _say if work or options.verbose else _quiet)
    except PrepareError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    _say(f"models prepared in {time.monotonic() - started:.1f} s ({', '.join(models)})")

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _StopRequestedError()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if options.static:
        return _run_static(options, cache_dir)
    return _run_on_ray(options, cache_dir)


def _run_on_ray(options: EmbeddedOptions, cache_dir: Path) -> int:
    from cortex.cluster.head import start_head, wait_for_head

    port = options.ray_port or _free_port()
    address = f"127.0.0.1:{port}"
    # Anyone who can reach a Ray cluster can run code on it: this one takes
    # only processes that know a token made for this run.
    token = secrets.token_hex(32)
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    env["NEURAXIS_CACHE_DIR"] = str(cache_dir)
    env["NEURAXIS_REPLICA_HOST"] = "127.0.0.1"
    state_dir = options.state_dir or default_state_dir()
    env["NEURAXIS_REPLICA_LOG_DIR"] = str(state_dir / "replicas")
    workdir = Path(tempfile.mkdtemp(prefix="neuraxis-up-"))
    spec = workdir / "deployment.toml"
    spec.write_text(embedded_spec(options))
    # `neuraxis status` with no arguments finds this cluster here.
    marker = state_dir / EMBEDDED_CLUSTER_FILE
    children: list[subprocess.Popen[bytes]] = []  # the head, then cortex

    env.update(_child_logging(options))
    watch = _ReplicaWatch(address, token)

    def run() -> int:
        head_log = workdir / "ray-head.log"
        started = time.monotonic()
        head = start_head(port, "127.0.0.1", {GENERATION_LABEL: "cpu"}, env, head_log)
        children.append(head)
        try:
            wait_for_head(address, head)
        except RuntimeError as e:
            tail = head_log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"neuraxis: {e}\n{tail}") from None
        _say(f"Ray started on {address} in {time.monotonic() - started:.1f} s")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch(mode=0o600)
        marker.write_text(json.dumps({"address": address, "token": token}))
        _say(
            f"starting cortex on {options.host}:{options.port}; it places {DEFAULT_CHAT_MODEL} "
            f"(x{options.replicas}) and {DEFAULT_EMBEDDING_MODEL} on Ray (vLLM CPU; neuron logs in "
            f"{state_dir / 'replicas'})"
        )
        _say(_auth_line(options))
        cortex_cmd = ["cortex", "--host", options.host, "--port", str(options.port)]
        cortex_cmd += ["--auth", options.auth]
        cortex_cmd += ["--ray-address", address, "--deployment", str(spec)]
        cortex_cmd += cortex_options(options)
        children.append(_spawn(cortex_cmd, env))
        try:
            for attempt in range(1, CORTEX_START_ATTEMPTS + 1):
                try:
                    _wait_ready(f"http://{options.host}:{options.port}", children, watch.poll)
                    break
                except ChildExitedError as e:
                    # cortex killed by a signal while it starts is started
                    # again, as systemd's Restart=always does for the service
                    # (an abort in native gRPC code during start-up has been
                    # seen under load); an exit with a status (bad settings)
                    # is final, and so is a third crash.
                    crashed = e.child is children[-1] and e.returncode < 0
                    if not crashed or attempt == CORTEX_START_ATTEMPTS:
                        raise
                    _warn(f"cortex was killed while starting (code {e.returncode}); again")
                    stop_process_group(e.child, timeout_s=STOP_TIMEOUT_S)
                    children[-1] = _spawn(cortex_cmd, env)
            watch.poll(now=True)  # the last replica's "ready" line
        finally:
            watch.close()
        return _serve(options, children)

    def stop() -> None:
        # cortex first (no new requests), then the replicas drain, then Ray.
        for child in reversed(children):
            if child is children[0] and child.poll() is None:
                _drain_replicas(address, env, workdir / "cluster-stop.log")
            stop_process_group(child, timeout_s=STOP_TIMEOUT_S)
        shutil.rmtree(workdir, ignore_errors=True)
        marker.unlink(missing_ok=True)

    return _run_until_stopped(run, stop)


def embedded_spec(options: EmbeddedOptions) -> str:
    """The embedded deployment: the bundled chat model (`--replicas` of it)
    and the embedding model (one replica), on the CPU. The routing policy is
    not in the spec but given to cortex (`--routing`), as for any cortex."""
    context = f"max_context = {options.max_model_len}\n" if options.max_model_len else ""
    chat = _SPEC_MODEL.format(
        model=DEFAULT_CHAT_MODEL, replicas=options.replicas, extra=context, kv=options.kv_cache_gib
    )
    # Pooling needs no room for generated tokens: the smallest KV cache.
    embedding = _SPEC_MODEL.format(model=DEFAULT_EMBEDDING_MODEL, replicas=1, extra="", kv=1)
    return f"{chat}\n{embedding}"


def cortex_options(options: EmbeddedOptions) -> list[str]:
    """The options `up` passes on to its cortex, in either mode."""
    args = ["--admin-port", str(options.admin_port)]
    if options.state_dir is not None:
        args += ["--state-dir", str(options.state_dir)]
    if options.routing is not None:
        args += ["--routing", options.routing.value]
    return args


_SPEC_MODEL = """[[models]]
id = "{model}"
source = "{model}"
replicas = {replicas}
generations = ["cpu"]
{extra}[models.engine]
kv_cache_gib = {kv}
"""


def _drain_replicas(address: str, env: dict[str, str], log_path: Path) -> None:
    """Let the controller drain and stop the replicas (in a child process, as
    a Ray driver with the run's token), so that the engines shut down cleanly.
    What Ray says meanwhile goes to a file; the console hears of a failure."""
    with open(log_path, "wb") as log:
        child = _spawn(["cluster", "stop", "--address", address], env, log)
    try:
        code = child.wait(timeout=STOP_TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        code = stop_process_group(child, timeout_s=5)
    if code != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
        _warn(f"could not drain the replicas (code {code}): {' '.join(tail)}")


def _child_logging(options: EmbeddedOptions) -> dict[str, str]:
    """cortex's log settings: on a terminal only its warnings and errors
    (the progress lines say the rest), unless --verbose; JSON for a file, a
    pipe or the journal keeps every line, since a machine reads those."""
    chosen = resolve_format(options.log_format, sys.stderr)
    quiet = chosen == "text" and not options.verbose
    return {
        "NEURAXIS_CORTEX_LOG_FORMAT": options.log_format,
        "NEURAXIS_CORTEX_LOG_LEVEL": "warning" if quiet else "info",
    }


class _ReplicaWatch:
    """Reads the controller's status while the replicas start (joining Ray
    as a driver with the run's token) and says what changed."""

    def __init__(self, address: str, token: str) -> None:
        self._address = address
        self._token = token
        self._progress = StartProgress()
        self._connected = False
        self._next = 0.0

    def poll(self, now: bool = False) -> None:
        if not now and time.monotonic() < self._next:
            return
        self._next = time.monotonic() + 1.0
        # Ray reads its authentication settings when it is first imported.
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = self._token
        from ray.exceptions import RayError

        from cortex.cluster.client import ClusterError, connect, status

        try:
            if not self._connected:
                self._connect(connect)
            current = status(timeout_s=5)
        except (ClusterError, RayError):
            return  # cortex has not started the controller yet
        for line in self._progress.update(current, time.monotonic()):
            (_warn if line.level is Level.WARNING else _say)(line.text)

    def _connect(self, connect: Callable[[str], None]) -> None:
        # Ray's own handler would print its INFO lines ("Connecting to
        # existing Ray cluster") on the console.
        logging.getLogger("ray").setLevel(logging.WARNING)
        # ray.init puts a SIGTERM handler of its own (sys.exit) in place of
        # the one that stops the children in order.
        handler = signal.getsignal(signal.SIGTERM)
        try:
            connect(self._address)
            self._connected = True
        finally:
            signal.signal(signal.SIGTERM, handler)

    def close(self) -> None:
        """Leave Ray before it stops, so that the driver has nothing to say."""
        if self._connected:
            import ray

            ray.shutdown()
            self._connected = False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_static(options: EmbeddedOptions, cache_dir: Path) -> int:
    children: list[subprocess.Popen[bytes]] = []

    def run() -> int:
        chat_cmd = _neuron_cmd(DEFAULT_CHAT_MODEL, options.neuron_port, cache_dir)
        chat_cmd += ["--kv-cache-gib", str(options.kv_cache_gib)]
        chat_cmd += ["--metrics-port", str(options.neuron_metrics_port)]
        if options.max_model_len:
            chat_cmd += ["--max-model-len", str(options.max_model_len)]
        # Pooling needs no room for generated tokens: the smallest KV cache.
        embed_cmd = _neuron_cmd(DEFAULT_EMBEDDING_MODEL, options.embedding_port, cache_dir)
        embed_cmd += ["--kv-cache-gib", "1", "--metrics-port", str(options.embedding_metrics_port)]
        # The neurons' own lines (vLLM's among them) go to files, as replicas' do.
        log_dir = (options.state_dir or default_state_dir()) / "neurons"
        log_dir.mkdir(parents=True, exist_ok=True)
        _say(
            f"starting neurons on 127.0.0.1:{options.neuron_port} ({DEFAULT_CHAT_MODEL}) and "
            f"127.0.0.1:{options.embedding_port} ({DEFAULT_EMBEDDING_MODEL}): vLLM CPU, ~40 s; "
            f"logs in {log_dir}"
        )
        for model, cmd in ((DEFAULT_CHAT_MODEL, chat_cmd), (DEFAULT_EMBEDDING_MODEL, embed_cmd)):
            with open(log_dir / f"{model}.log", "ab") as log:
                children.append(_spawn(cmd, None, log))
        _say(f"starting cortex on {options.host}:{options.port}")
        _say(_auth_line(options))
        cortex_cmd = ["cortex", "--host", options.host, "--port", str(options.port)]
        cortex_cmd += ["--auth", options.auth]
        for port in (options.neuron_port, options.embedding_port):
            cortex_cmd += ["--neuron", f"127.0.0.1:{port}"]
        for model in (DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL):
            cortex_cmd += ["--model", model]
        cortex_cmd += cortex_options(options)
        children.append(_spawn(cortex_cmd, dict(os.environ, **_child_logging(options))))
        _wait_ready(f"http://{options.host}:{options.port}", children)
        return _serve(options, children)

    def stop() -> None:
        # cortex first, so that it stops taking requests before the neuron goes.
        for child in reversed(children):
            stop_process_group(child, timeout_s=STOP_TIMEOUT_S)

    return _run_until_stopped(run, stop)


def _run_until_stopped(run: Callable[[], int], stop: Callable[[], None]) -> int:
    """`run` until it returns or Ctrl-C / SIGTERM arrives; then `stop`, with
    further signals ignored so that the stopping is not cut short."""
    try:
        return run()
    except _StopRequestedError:
        _say("stopping")
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop()
        _say("stopped")


def _serve(options: EmbeddedOptions, children: list[subprocess.Popen[bytes]]) -> int:
    """Once cortex is ready: say how to call it, and watch the children: when
    one exits, everything stops (exit code 1)."""
    _print_banner(f"http://{options.host}:{options.port}", _admin_url(options), options.auth)
    while all(c.poll() is None for c in children):
        time.sleep(0.5)
    dead = next(c for c in children if c.poll() is not None)
    print(f"neuraxis: a child process exited (code {dead.returncode}); stopping", file=sys.stderr)
    return 1


def _admin_url(options: EmbeddedOptions) -> str:
    # cortex's admin listener stays on its default address, loopback.
    return f"http://127.0.0.1:{options.admin_port}"


def _neuron_cmd(model: str, port: int, cache_dir: Path) -> list[str]:
    return [
        "neuron",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        model,
        "--cache-dir",
        str(cache_dir),
    ]


def _spawn(
    args: list[str], env: dict[str, str] | None = None, out: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "neuraxis.app.cli", *args],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT if out else None,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


class ChildExitedError(SystemExit):
    """A child process ended while the stack was starting (a SystemExit: up
    ends with its message unless the caller starts the child again)."""

    def __init__(self, child: subprocess.Popen[bytes], code: int) -> None:
        super().__init__(f"neuraxis: a child process exited during start-up (code {code})")
        self.child = child
        self.returncode = code


def _wait_ready(
    base: str, children: list[subprocess.Popen[bytes]], poll: Callable[[], None] | None = None
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if poll is not None:
            poll()
        for child in children:
            if child.poll() is not None:
                raise ChildExitedError(child, child.returncode)
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"neuraxis: not ready after {READY_TIMEOUT_S:.0f} s")


def _auth_line(options: EmbeddedOptions) -> str:
    if options.auth == "required":
        return (
            f"auth required: every /v1 request needs a key (neuraxis keys create --tenant "
            f"NAME{' --state-dir ' + str(options.state_dir) if options.state_dir else ''})"
        )
    return (
        f"auth off: cortex listens on {options.host} only, for this machine's users "
        "(--auth required to use API keys)"
    )


def _print_banner(base: str, admin: str, auth: str = "off") -> None:
    question = "What is the capital of France?"
    message = f'{{"role": "user", "content": "{question}"}}'
    body = f'{{"model": "{DEFAULT_CHAT_MODEL}", "temperature": 0, "messages": [{message}]}}'
    _say(f"ready: {base}")
    # With auth required the example needs a key (neuraxis keys create).
    key = '\n    -H "Authorization: Bearer $NEURAXIS_API_KEY" \\' if auth == "required" else ""
    print(
        f"""
An OpenAI-compatible API at {base}/v1 (model {DEFAULT_CHAT_MODEL}):

  curl {base}/v1/chat/completions -H 'Content-Type: application/json' \\{key}
    -d '{body}'

Metrics for Prometheus at {admin}/metrics, the neurons' at {admin}/sd/neurons.

Press Ctrl-C to stop.
""",
        flush=True,
    )


def _say(line: str) -> None:
    print(f"neuraxis: {line}", flush=True)


def _warn(line: str) -> None:
    print(f"neuraxis: warning: {line}", file=sys.stderr, flush=True)


def _quiet(line: str) -> None:
    pass
