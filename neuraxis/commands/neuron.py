"""`neuraxis neuron serve | agent`: serve one model over gRPC, or join a Ray
cluster as a GPU host. Their options are generated from NeuronSettings (the
agent's: only the settings it reads, AGENT_SETTINGS)."""

from __future__ import annotations

import argparse
import sys

from axon.neuron_settings import AGENT_SETTINGS, NeuronSettings
from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_group,
    add_service_options,
    service_settings,
)

COMMANDS = {
    "serve": Help(
        "serve a model over gRPC",
        "Serve one model over gRPC (axon.v1.Neuron and grpc.health.v1).",
    ),
    "agent": Help(
        "join a Ray cluster as a GPU host",
        "Detect this host's GPUs, refuse a generation other than the configured one, and "
        "join the Ray cluster at ray_address labelled with the generation (in the "
        "foreground).",
    ),
}


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("run a neuron", "Neuron commands.")
    neuron, commands = add_group(sub, "neuron", text, COMMANDS)
    serve = commands["serve"]
    serve.add_argument(
        "--print-engine-args",
        action="store_true",
        help="print the vLLM engine arguments and environment this neuron would start "
        "with (JSON) and exit; with --generation, no GPU detection",
    )
    add_service_options(serve, NeuronSettings)
    agent_help = "TOML settings file (neuron.toml)"
    add_service_options(commands["agent"], NeuronSettings, agent_help, AGENT_SETTINGS)
    return neuron


def run(args: argparse.Namespace) -> int:
    settings = service_settings(args, NeuronSettings)
    if args.neuron_command == "agent":
        from neuron.agent import run_agent

        return run_agent(settings)
    if args.print_engine_args:
        from neuron.engineargs import print_engine_args
        from neuron.gpu import load_nvml

        return print_engine_args(settings, load_nvml(), sys.stdout)
    from neuron.main import run as run_neuron

    return run_neuron(settings)
