"""`neuraxis tls init DIR`: a cluster's mutual-TLS files; the certificates
are made by neuraxis/tls.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    tls = sub.add_parser("tls", help="mutual TLS files", description="TLS commands.")
    tls_sub = tls.add_subparsers(dest="tls_command", required=True, metavar="COMMAND")
    init = tls_sub.add_parser(
        "init",
        help="make a CA and cortex's and the neurons' certificates",
        description="Write a cluster's mutual-TLS files into DIR: ca.crt and ca.key, "
        "cortex.crt and cortex.key, neuron.crt and neuron.key (keys mode 0600). "
        "Existing files are not overwritten.",
    )
    init.add_argument("directory", type=Path, metavar="DIR")
    init.add_argument(
        "--san",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name or IP address for the neuron certificate, for clients other "
        "than cortex (repeatable; cortex checks the name neuraxis-neuron)",
    )
    return tls


def run(args: argparse.Namespace) -> int:
    from neuraxis.tls import TlsInitError, init_cluster_tls

    try:
        written = init_cluster_tls(args.directory, args.san)
    except (TlsInitError, OSError) as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
