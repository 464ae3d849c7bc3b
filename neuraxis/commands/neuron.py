"""`neuraxis neuron serve | agent`: serve one model over gRPC, or join a Ray
cluster as a GPU host. Their options are generated from NeuronSettings (the
agent's: only the settings it reads, AGENT_SETTINGS)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from axon.neuron_settings import AGENT_SETTINGS, NeuronSettings
from axon.settings import load_settings
from neuraxis.options import add_settings_options, overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    neuron = sub.add_parser("neuron", help="run a neuron", description="Neuron commands.")
    neuron_sub = neuron.add_subparsers(dest="neuron_command", required=True, metavar="COMMAND")
    serve = neuron_sub.add_parser(
        "serve",
        help="serve a model over gRPC",
        description="Serve one model over gRPC (axon.v1.Neuron and grpc.health.v1).",
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
    return neuron


def run(args: argparse.Namespace) -> int:
    # Its options over NEURAXIS_NEURON_* over --config's TOML.
    settings = load_settings(NeuronSettings, args.config, overrides(args, NeuronSettings))
    if args.neuron_command == "agent":
        from neuron.agent import run_agent

        return run_agent(settings)
    if args.print_engine_args:
        from neuron.engineargs import print_engine_args
        from neuron.gpu import load_nvml

        return print_engine_args(settings, load_nvml(), sys.stdout)
    from neuron.main import run as run_neuron

    return run_neuron(settings)
