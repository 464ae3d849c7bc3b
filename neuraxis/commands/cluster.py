"""`neuraxis cluster stop | apply`: drain and stop every replica and the
controller (what `up` runs on Ctrl-C), or hand the running controller a new
deployment spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
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
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    return 0
