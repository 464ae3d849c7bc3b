"""`neuraxis up`: the embedded default on one machine.

Prepares the bundled chat model, starts a neuron (vLLM on the CPU) and cortex
as child processes, waits until cortex is ready, prints how to call it, and on
Ctrl-C or SIGTERM stops everything it started. Each child runs in its own
process group (so the terminal's Ctrl-C reaches only this supervisor, which
stops the children in order) and is told by the kernel to exit if the
supervisor dies without cleaning up.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from neuraxis.process import stop_process_group
from neuron.models.bundled import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from neuron.models.prepare import PrepareError, default_cache_dir, prepare_all

READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 40.0


@dataclass(frozen=True)
class EmbeddedOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    neuron_port: int = 50051
    embedding_port: int = 50052
    neuron_metrics_port: int = 9400
    embedding_metrics_port: int = 9401
    cache_dir: Path | None = None
    state_dir: Path | None = None
    kv_cache_gib: int = 1
    max_model_len: int | None = None


class _StopRequestedError(Exception):
    pass


def run_embedded(options: EmbeddedOptions) -> int:
    cache_dir = options.cache_dir or default_cache_dir()
    try:
        prepare_all(cache_dir, [DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL], _say)
    except PrepareError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _StopRequestedError()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    children: list[subprocess.Popen[bytes]] = []
    try:
        chat_cmd = _neuron_cmd(DEFAULT_CHAT_MODEL, options.neuron_port, cache_dir)
        chat_cmd += ["--kv-cache-gib", str(options.kv_cache_gib)]
        chat_cmd += ["--metrics-port", str(options.neuron_metrics_port)]
        if options.max_model_len:
            chat_cmd += ["--max-model-len", str(options.max_model_len)]
        # Pooling needs no room for generated tokens: the smallest KV cache.
        embed_cmd = _neuron_cmd(DEFAULT_EMBEDDING_MODEL, options.embedding_port, cache_dir)
        embed_cmd += ["--kv-cache-gib", "1", "--metrics-port", str(options.embedding_metrics_port)]
        _say(
            f"starting neurons on 127.0.0.1:{options.neuron_port} ({DEFAULT_CHAT_MODEL}) and "
            f"127.0.0.1:{options.embedding_port} ({DEFAULT_EMBEDDING_MODEL}): vLLM CPU, ~40 s"
        )
        children.append(_spawn(chat_cmd))
        children.append(_spawn(embed_cmd))
        _say(f"starting cortex on {options.host}:{options.port}")
        cortex_cmd = ["cortex", "--host", options.host, "--port", str(options.port)]
        for port in (options.neuron_port, options.embedding_port):
            cortex_cmd += ["--neuron", f"127.0.0.1:{port}"]
        for model in (DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL):
            cortex_cmd += ["--model", model]
        if options.state_dir is not None:
            cortex_cmd += ["--state-dir", str(options.state_dir)]
        children.append(_spawn(cortex_cmd))
        base = f"http://{options.host}:{options.port}"
        _wait_ready(base, children)
        _print_banner(base)
        while all(c.poll() is None for c in children):
            time.sleep(0.5)
        dead = next(c for c in children if c.poll() is not None)
        print(
            f"neuraxis: a child process exited (code {dead.returncode}); stopping", file=sys.stderr
        )
        return 1
    except _StopRequestedError:
        _say("stopping")
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # cortex first, so that it stops taking requests before the neuron goes.
        for child in reversed(children):
            stop_process_group(child, timeout_s=STOP_TIMEOUT_S)
        _say("stopped")


def _neuron_cmd(model: str, port: int, cache_dir: Path) -> list[str]:
    return [
        "neuron", "serve", "--host", "127.0.0.1", "--port", str(port), "--model", model,
        "--cache-dir", str(cache_dir),
    ]  # fmt: skip


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "neuraxis.cli", *args],
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def _die_with_parent() -> None:
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_ready(base: str, children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for child in children:
            if child.poll() is not None:
                raise SystemExit(
                    f"neuraxis: a child process exited during start-up (code {child.returncode})"
                )
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"neuraxis: not ready after {READY_TIMEOUT_S:.0f} s")


def _print_banner(base: str) -> None:
    question = "What is the capital of France?"
    message = f'{{"role": "user", "content": "{question}"}}'
    body = f'{{"model": "{DEFAULT_CHAT_MODEL}", "temperature": 0, "messages": [{message}]}}'
    print(
        f"""
neuraxis is ready: an OpenAI-compatible API at {base}/v1 (model {DEFAULT_CHAT_MODEL})

  curl {base}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{body}'

Press Ctrl-C to stop.
""",
        flush=True,
    )


def _say(line: str) -> None:
    print(f"neuraxis: {line}", flush=True)
