"""`neuraxis up --static`: the two neurons (vLLM on the CPU) started
directly on the fixed --*-port options, and cortex in front of them, without
Ray. On Ctrl-C or SIGTERM: cortex stops first, then the neurons.

A cortex that dies is started again by the supervisor in front of the same
neurons; a neuron that dies ends the stack."""

from __future__ import annotations

import os
from pathlib import Path

from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from axon.process import stop_process_group
from cortex.config import default_state_dir
from neuraxis.console import auth_line, print_banner, say
from neuraxis.embedded import EmbeddedOptions, cortex_command, cortex_logging, tracing_env
from neuraxis.supervisor import STOP_TIMEOUT_S, run_until_stopped, spawn, supervise_cortex


def run_static(options: EmbeddedOptions, cache_dir: Path) -> int:
    where: list[str] = []
    for port in (options.neuron_port, options.embedding_port):
        where += ["--neuron", f"127.0.0.1:{port}"]
    for model in (DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL):
        where += ["--model", model]
    cortex_cmd = cortex_command(options, *where)
    traced = tracing_env(options)
    cortex_env = dict(os.environ, **cortex_logging(options), **traced)
    supervisor = supervise_cortex(cortex_cmd, cortex_env, options.base_url)

    def run() -> int:
        chat_cmd = _neuron_command(DEFAULT_CHAT_MODEL, options.neuron_port, cache_dir)
        chat_cmd += ["--kv-cache-gib", str(options.kv_cache_gib)]
        chat_cmd += ["--metrics-port", str(options.neuron_metrics_port)]
        if options.max_model_len:
            chat_cmd += ["--max-model-len", str(options.max_model_len)]
        # Pooling needs no room for generated tokens: the smallest KV cache.
        embed_cmd = _neuron_command(DEFAULT_EMBEDDING_MODEL, options.embedding_port, cache_dir)
        embed_cmd += ["--kv-cache-gib", "1", "--metrics-port", str(options.embedding_metrics_port)]
        # The neurons' own lines (vLLM's among them) go to files, as replicas' do.
        log_dir = (options.state_dir or default_state_dir()) / "neurons"
        log_dir.mkdir(parents=True, exist_ok=True)
        say(
            f"starting neurons on 127.0.0.1:{options.neuron_port} ({DEFAULT_CHAT_MODEL}) and "
            f"127.0.0.1:{options.embedding_port} ({DEFAULT_EMBEDDING_MODEL}): vLLM CPU, ~40 s; "
            f"logs in {log_dir}"
        )
        for model, cmd in ((DEFAULT_CHAT_MODEL, chat_cmd), (DEFAULT_EMBEDDING_MODEL, embed_cmd)):
            with open(log_dir / f"{model}.log", "ab") as log:
                env = dict(os.environ, **traced) if traced else None
                supervisor.add(f"the {model} neuron", spawn(cmd, env, log))
        say(f"starting cortex on {options.host}:{options.port}")
        say(auth_line(options))
        supervisor.start_cortex()
        supervisor.wait_ready()
        print_banner(options)
        return supervisor.serve()

    def stop() -> None:
        # cortex first, so that it stops taking requests before the neurons go.
        for child in reversed(supervisor.children()):
            stop_process_group(child, timeout_s=STOP_TIMEOUT_S)

    return run_until_stopped(run, stop)


def _neuron_command(model: str, port: int, cache_dir: Path) -> list[str]:
    serve = ["neuron", "serve", "--host", "127.0.0.1", "--port", str(port), "--model", model]
    # Plaintext on purpose: cortex reaches it on loopback only.
    return [*serve, "--plaintext", "--cache-dir", str(cache_dir)]
