"""What every benchmark shares: the command-line switches (`--smoke`,
`--base-url`, `--admin-url`, `--out`) and the stack it measures, either a
`neuraxis up` started for the run or one already running (the test
session's, in smoke runs). Neurons are found through cortex's service
discovery (/sd/neurons, on its admin listener), because Ray places the
replicas on ports of their choosing.

The workloads themselves are in workload.py; the simulated Ray cluster of
the failover benchmark in sim_cluster.py.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cortex.config import AdminSettings
from harness.procs import neuron_addresses, start_up, wait_http_ready

CHAT_MODEL = "smollm2-135m-instruct"
EMBEDDING_MODEL = "all-minilm-l6-v2"
ENGINE_START_TIMEOUT_S = 900
RESULTS = Path("bench/results")
# cortex's admin listener as it binds by default: loopback, the default port.
DEFAULT_ADMIN_URL = f"http://127.0.0.1:{AdminSettings.model_fields['port'].default}"


@dataclass(frozen=True)
class Target:
    """A running stack: cortex's URL, its admin listener's and each model's
    neuron (gRPC address); for a stack started here, the pid of `neuraxis up`
    (whose process tree is the whole stack: cortex, Ray, the neurons and
    their engine cores)."""

    base_url: str
    admin_url: str
    neurons: dict[str, str]
    root_pid: int | None = None

    @property
    def chat_neuron(self) -> str:
        return self.neurons[CHAT_MODEL]

    @property
    def embedding_neuron(self) -> str:
        return self.neurons[EMBEDDING_MODEL]


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the switches every benchmark takes."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few requests, seconds: proves the benchmark runs (make test), measures nothing",
    )
    parser.add_argument(
        "--base-url",
        help="measure an already running `neuraxis up` (e.g. http://127.0.0.1:8000) "
        "instead of starting one",
    )
    parser.add_argument(
        "--admin-url",
        default=DEFAULT_ADMIN_URL,
        help="with --base-url: that cortex's admin listener, where its metrics and neurons are "
        f"listed (default {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument(
        "--out", type=Path, help=f"where to write the JSON summary (default: {RESULTS}/...)"
    )
    return parser


def output_path(args: argparse.Namespace, name: str) -> Path | None:
    """Where the summary goes: --out, or bench/results/<name> for a real run.
    A smoke run writes nothing unless told, so it never replaces real figures."""
    if args.out is not None:
        return Path(args.out)
    return None if args.smoke else RESULTS / name


def logs_dir(out: Path | None, name: str) -> Path:
    """The folder `name` for the logs of a benchmark's processes: beside its
    summary `out`, or under RESULTS when nothing is written (a smoke run)."""
    return (out.parent if out is not None else RESULTS) / name


def write_summary(path: Path | None, summary: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2))


@contextmanager
def running_stack(
    args: argparse.Namespace, log_path: Path, up_args: Sequence[str] = ()
) -> Iterator[Target]:
    """The stack at `--base-url` (its admin listener at `--admin-url`), or a
    `neuraxis up` on free ports (logging to `log_path`, with `up_args` added
    to its options) stopped at the end."""
    if args.base_url:
        admin = args.admin_url.rstrip("/")
        yield Target(args.base_url.rstrip("/"), admin, neuron_addresses(admin))
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    up = start_up(log_path, extra=up_args)
    try:
        print(f"starting neuraxis up (log: {log_path}) ...", flush=True)
        wait_http_ready(up.proc, f"{up.base_url}/readyz", ENGINE_START_TIMEOUT_S)
        yield Target(up.base_url, up.admin_url, neuron_addresses(up.admin_url), up.proc.popen.pid)
    finally:
        up.proc.stop()
