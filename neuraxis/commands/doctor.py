"""`neuraxis doctor`: its options and its run (the shape of every command
module: `add_parser(subparsers)`, `run(args) -> int`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuraxis.commands.shared import Help, Subparsers, add_command
from neuraxis.doctor.finding import Check, Finding, Status
from neuraxis.doctor.host import CONFIG_DIR, TMPFILES, Host

AREAS = ("gpus", "engine", "cluster", "network", "tls", "state")
DOCTOR = Help(
    "check this host end to end",
    "Check this host (head, cortex or GPU host) end to end: the GPUs through NVML and the "
    "installed flavour, the engine (vLLM, torch, the model cache), the cluster (the Ray head, "
    "the token, this node's labels), the network (ports, firewalld, cortex), TLS and the "
    "state (directories, the store, the deployment spec). Each check prints what it found "
    "and what to do; the exit status is 0 only when every check that applies passes.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    parser = add_command(sub, "doctor", DOCTOR)
    configure(parser)
    return parser


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--config-dir",
        type=Path,
        default=CONFIG_DIR,
        help=f"where cortex.toml, neuron.toml and head.toml are looked for (default {CONFIG_DIR})",
    )
    parser.add_argument("--cortex", type=Path, help="cortex.toml (default: in --config-dir)")
    parser.add_argument("--neuron", type=Path, help="neuron.toml (default: in --config-dir)")
    parser.add_argument("--head", type=Path, help="head.toml (default: in --config-dir)")
    parser.add_argument(
        "--deployment", type=Path, help="a deployment spec to check (default: cortex.toml's)"
    )
    parser.add_argument(
        "--cortex-url", help="cortex's URL, checked from this host (e.g. http://10.0.0.10:8080)"
    )
    parser.add_argument(
        "--area",
        action="append",
        choices=AREAS,
        help="check only this area (repeatable; default: all)",
    )
    parser.add_argument("--tmpfiles", type=Path, default=TMPFILES, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    from neuraxis.doctor.report import passed, render_json, render_text

    host = Host(
        config_dir=args.config_dir,
        cortex_file=args.cortex,
        neuron_file=args.neuron,
        head_file=args.head,
        deployment_file=args.deployment,
        cortex_url=args.cortex_url,
        tmpfiles=args.tmpfiles,
    )
    findings = diagnose(host, args.area or list(AREAS))
    sys.stdout.write(render_json(findings) if args.json else render_text(findings))
    return 0 if passed(findings) else 1


def diagnose(host: Host, areas: list[str]) -> list[Finding]:
    findings: list[Finding] = []
    for area in areas:
        findings.extend(_run_area(area, _check_of(area), host))
    # Problems reading the configuration, found while the areas read it.
    return host.problems + findings


def _check_of(area: str) -> Check:
    from importlib import import_module

    check: Check = import_module(f"neuraxis.doctor.{area}").check
    return check


def _run_area(area: str, check: Check, host: Host) -> list[Finding]:
    """An area's findings; a check that breaks is a finding too, so that the
    other areas still run."""
    try:
        return check(host)
    except Exception as e:  # reported as a failed check, with its type and message
        return [
            Finding(
                area,
                "doctor",
                Status.FAIL,
                f"the check itself failed: {type(e).__name__}: {e}",
                "report this; the other areas ran",
            )
        ]
