"""`neuraxis cluster stop | apply`: drain and stop every replica and the
controller (what `up` runs on Ctrl-C), or hand the running controller a new
deployment spec."""

from __future__ import annotations

import argparse
from pathlib import Path

from neuraxis.commands.shared import Help, Subparsers, add_group, fail

COMMANDS = {
    "stop": Help(
        "drain and stop every replica and the controller",
        "Drain every replica (in-flight requests finish), stop them and the controller. "
        "Ray itself keeps running.",
    ),
    "apply": Help(
        "give the controller a new deployment spec",
        "Check a deployment spec and hand it to the running controller: new replicas are "
        "placed, surplus ones drained, models left out of it stopped.",
    ),
}


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    cluster, commands = add_group(
        sub, "cluster", Help("manage the cluster", "Cluster commands."), COMMANDS
    )
    commands["apply"].add_argument("deployment", type=Path, help="the deployment spec (TOML)")
    for command in commands.values():
        command.add_argument("--address", required=True, help="the Ray head's host:port")
    return cluster


def run(args: argparse.Namespace) -> int:
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
        return fail(e)
    return 0
