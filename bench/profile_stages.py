"""Where the time goes: py-spy's samples of the stack's Python processes under
streamed-chat load, sorted into the stages a token passes through, and turned
into CPU milliseconds per output token.

Each sampled stack is given to the first stage (looking from the innermost
frame outwards) one of whose patterns its file matches; a stage's CPU per
token is its share of the process's samples times the process's CPU seconds
(psutil) over the output tokens of the load. py-spy leaves idle threads out,
so the shares are of CPU time, not of wall time.

    python -m bench.profile_stages --lock /tmp/neuraxis-heavy.lock            # neuraxis up
    python -m bench.profile_stages --vllm --lock /tmp/neuraxis-heavy.lock     # vLLM's server

What does not live here: the A/B comparison (vs_vllm.py).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness import plots
from harness.bench_stack import CHAT_MODEL, RESULTS, parser, running_stack
from harness.chat_stream import CpuMeter, role, run_batch
from harness.heavy import held, listening_pid
from harness.py_spy import read_raw
from harness.vllm_server import matched_settings, running_vllm

PROFILED = ("neuron", "cortex", "vLLM API server")
# Installed beside this interpreter (pyproject.toml pins it).
PY_SPY = Path(sys.executable).parent / "py-spy"


@dataclass(frozen=True)
class Profile:
    role: str
    pid: int
    samples: Counter[str]
    cpu_ms_per_token: float


def pids_by_role(root_pid: int) -> dict[str, int]:
    """The first process of each profiled role under root (the busiest neuron
    is the chat one: the embedding neuron is idle under this load)."""
    root = psutil.Process(root_pid)
    found: dict[str, tuple[float, int]] = {}
    for p in [root, *root.children(recursive=True)]:
        try:
            name = role(" ".join(p.cmdline()), p.name())
            cpu = sum(p.cpu_times()[:2])
        except psutil.Error:
            continue
        if name in PROFILED and (name not in found or cpu > found[name][0]):
            found[name] = (cpu, p.pid)
    return {name: pid for name, (_, pid) in found.items()}


def profile(root_pid: int, base_url: str, out: Path, concurrency: int, requests: int) -> str:
    meter = CpuMeter(root_pid)
    asyncio.run(run_batch(base_url, CHAT_MODEL, 2, 4, 8, {}, meter))
    pids = pids_by_role(root_pid)
    out.mkdir(parents=True, exist_ok=True)
    record = [str(PY_SPY), "record", "--rate", "200", "--format", "raw", "--nonblocking"]
    spies = {
        name: subprocess.Popen(
            [*record, "--pid", str(pid), "-o", str(out / f"{_file(name)}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    }
    batch = asyncio.run(run_batch(base_url, CHAT_MODEL, concurrency, requests, 64, {}, meter))
    for spy in spies.values():
        spy.send_signal(signal.SIGINT)
    for spy in spies.values():
        spy.wait(timeout=60)
    profiles = [
        Profile(
            name,
            pid,
            read_raw(out / f"{_file(name)}.txt"),
            batch.cpu_s.get(name, 0.0) / batch.tokens * 1000,
        )
        for name, pid in pids.items()
    ]
    return report(profiles, batch.cpu_s, batch.tokens, batch.wall_s)


def report(profiles: list[Profile], cpu_s: dict[str, float], tokens: int, wall_s: float) -> str:
    rows: list[list[object]] = []
    for p in profiles:
        total = sum(p.samples.values()) or 1
        for stage, n in p.samples.most_common():
            share, micros = n / total, n / total * p.cpu_ms_per_token * 1000
            rows.append([p.role, stage, f"{share * 100:.1f}%", f"{micros:.0f}"])
    roles = [[name, seconds / tokens * 1000] for name, seconds in sorted(cpu_s.items())]
    return "\n".join(
        [
            f"{tokens} output tokens in {wall_s:.1f} s ({tokens / wall_s:.1f} tokens/s)",
            "",
            plots.markdown_table(["process", "CPU ms / output token"], roles),
            "",
            plots.markdown_table(["process", "stage", "share", "CPU µs / output token"], rows),
        ]
    )


def _file(role_name: str) -> str:
    return role_name.replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--vllm", action="store_true", help="profile vLLM's server instead")
    cli.add_argument("--concurrency", type=int, default=16)
    cli.add_argument("--requests", type=int, default=64)
    cli.add_argument("--lock", type=Path, help="a lock file to hold while measuring (flock)")
    args = cli.parse_args(argv)
    # A SIGTERM unwinds like Ctrl-C: the servers started here are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.smoke:
        args.concurrency, args.requests = 2, 2
    side = "vllm" if args.vllm else "neuraxis"
    out = Path(args.out) if args.out else RESULTS / "profile" / side
    flags, env, _, _ = matched_settings() if args.vllm else ([], {}, {}, {})
    with held(args.lock), ExitStack() as stack:
        if args.vllm:
            server = stack.enter_context(running_vllm(flags, env, out / "vllm-serve.log"))
            root, base = server.popen.pid, server.base_url
        else:
            target = stack.enter_context(running_stack(args, out / "up.log"))
            root = target.root_pid or listening_pid(target.base_url) or 0
            base = target.base_url
        text = profile(root, base, out, args.concurrency, args.requests)
    print(text)
    plots.write_markdown(out, "stages", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
