"""`neuraxis tls init DIR`: a cluster's mutual-TLS files; the certificates
are made by neuraxis/tls.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from neuraxis.commands.shared import Help, Subparsers, add_group, fail

INIT = Help(
    "make a CA and cortex's and the neurons' certificates",
    "Write a cluster's mutual-TLS files into DIR: ca.crt and ca.key, cortex.crt and "
    "cortex.key, neuron.crt and neuron.key (keys mode 0600). Existing files are not "
    "overwritten. As root, --cortex-user, --neuron-user and --group hand the keys to the "
    "services' users (the CA's key stays root's), as the RPM's post-install does.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    tls, commands = add_group(sub, "tls", Help("mutual TLS files", "TLS commands."), {"init": INIT})
    init = commands["init"]
    init.add_argument("directory", type=Path, metavar="DIR")
    init.add_argument(
        "--san",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name or IP address for the neuron certificate, for clients other "
        "than cortex (repeatable; cortex checks the name neuraxis-neuron)",
    )
    for side, whose in (("cortex", "the user cortex runs as"), ("neuron", "the neurons' user")):
        init.add_argument(
            f"--{side}-user", metavar="USER", help=f"the owner of {side}.key ({whose})"
        )
    init.add_argument(
        "--group",
        metavar="GROUP",
        help="DIR's group, mode 0750: a group both users are in, so that each reaches its key",
    )
    return tls


def run(args: argparse.Namespace) -> int:
    from neuraxis.tls import Owners, TlsInitError, init_cluster_tls

    owners = Owners(args.cortex_user, args.neuron_user, args.group)
    try:
        written = init_cluster_tls(args.directory, args.san, owners=owners)
    except (TlsInitError, OSError) as e:
        return fail(e)
    for path in written:
        print(path)
    return 0
