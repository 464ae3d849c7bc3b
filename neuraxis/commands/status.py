"""`neuraxis status [--watch]`: the cluster as the controller sees it; the
rendering is neuraxis/status.py, the status itself cortex/cluster/status.py."""

from __future__ import annotations

import argparse
import sys

from neuraxis.commands.shared import (
    Help,
    Subparsers,
    UsageError,
    add_cluster_options,
    add_command,
    cluster_of,
    fail,
)

STATUS = Help(
    "show the cluster: nodes, models, replicas",
    "Nodes (host, generation, GPUs), models and their replicas (state, address, "
    "generation; requests in flight through cortex, and the engine's running and waiting "
    "requests with the age of that count), the cortex instances that report to the "
    "controller, and unplaceable replicas with the reason.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    parser = add_command(sub, "status", STATUS)
    add_cluster_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from neuraxis.status import render, render_json, watch

    address = cluster_of(args)
    # Imported once the address (and a running `up`'s token) is known: Ray
    # reads its authentication settings when it is first imported.
    from cortex.cluster.client import ClusterError, connect, status

    every: float | None = args.watch
    if every is not None and (args.json or every <= 0):
        raise UsageError("--watch takes a positive interval and no --json")
    from cortex.cluster.plane import head_answers

    if not head_answers(address):
        return fail(
            f"the Ray head at {address} does not answer: the control plane is down (cortex "
            "serves on from its last table; see neuraxis_ray_head_up)"
        )
    try:
        connect(address)
        if every is not None:
            watch(status, sys.stdout, every)
            return 0
        current = status()
    except ClusterError as e:
        return fail(e)
    except KeyboardInterrupt:
        return 0
    sys.stdout.write(render_json(current) if args.json else render(current))
    return 0
