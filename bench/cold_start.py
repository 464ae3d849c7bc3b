"""Cold start from zero replicas (issue 27): `neuraxis up --deployment` with a
chat model at `min_replicas = 0`; each round waits until the model has no
replica, sends one streamed request and measures its time to first token
and the parts of it:

- wake: the request's arrival until the controller created a replica (the
  queued request reported by cortex, the controller's next pass);
- placement: created until Ray placed the replica's actor on a node;
- process start: placed until the neuron listened (the actor starting the
  neuron process, Python and its imports);
- engine load: listening until the neuron's engine was ready (vLLM's build
  and the model's weights);
- readiness: engine ready until the controller put the replica in the
  routing table (its health check, the table reaching cortex);
- first token: in the table until the first token reached the client (the
  queued request routed, its prefill).

The parts come from the controller's status (each replica's created,
placed and ready times) and the neuron's log lines ("listening",
"ready on"); the whole from the client, beside the answer's
`x-neuraxis-cold-start-ms`.

    make bench-cold-start                # SmolLM2 on vLLM, 3 rounds
    python -m bench.cold_start --smoke   # a simulated engine, 1 round (make test)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

import httpx

from harness.bench_stack import CHAT_MODEL, ENGINE_START_TIMEOUT_S, output_path, parser
from harness.plots import markdown_table, write_results
from harness.polling import wait_until
from harness.procs import REPO, start_up, up_state_dir, wait_http_ready

MODEL = "chat"
PARTS = ("wake", "placement", "process start", "engine load", "readiness", "first token")
IDLE_S = 10.0  # idle time before the last replica goes (scale_to_zero_after_s)


def spec(smoke: bool) -> str:
    """One chat model at min_replicas 0 on the embedded cluster's CPU node."""
    if smoke:
        source = '"sim"\n[models.engine]\nkind = "sim"\nsim_load_s = 1.0'
    else:
        source = f'"{CHAT_MODEL}"'
    return (
        f'[[models]]\nid = "{MODEL}"\ngenerations = ["cpu"]\nsource = {source}\n'
        f"[models.autoscale]\nmin_replicas = 0\nmax_replicas = 1\nscale_up_after_s = 0\n"
        f"scale_to_zero_after_s = {IDLE_S:g}\n"
    )


def cluster_status(state_dir: Path) -> dict[str, Any]:
    """`neuraxis status --json` of the running `up` (found by its state
    directory, as a user's second terminal finds it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env["XDG_STATE_HOME"] = str(state_dir.parent)
    done = subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
        check=True,
    )
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def replicas(state_dir: Path) -> list[dict[str, Any]]:
    model = next(m for m in cluster_status(state_dir)["models"] if m["id"] == MODEL)
    found: list[dict[str, Any]] = model["replicas"]
    return found


def first_token(base_url: str, max_tokens: int) -> tuple[float, float, int | None]:
    """One streamed request: when it was sent and when its first token came
    (wall times), and its cold-start header in milliseconds."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    sent = time.time()
    with httpx.stream(
        "POST", f"{base_url}/v1/chat/completions", json=body, timeout=ENGINE_START_TIMEOUT_S
    ) as response:
        response.raise_for_status()
        header = response.headers.get("x-neuraxis-cold-start-ms")
        first = 0.0
        for line in response.iter_lines():
            if not first and line.startswith("data: {") and '"content":"' in line:
                first = time.time()
    assert first, "no token came"
    return sent, first, int(header) if header is not None else None


def neuron_times(log: Path) -> tuple[float, float]:
    """When the neuron of `log` listened and when its engine was ready (its
    last start in that file), from its JSON log lines."""
    listening = ready = 0.0
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        at = datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
        if entry["msg"].startswith("neuron listening"):
            listening, ready = at, 0.0
        elif entry["msg"].startswith("neuron ready on"):
            ready = at
    assert listening and ready, f"no start found in {log}"
    return listening, ready


def one_round(base_url: str, state_dir: Path, max_tokens: int) -> dict[str, float]:
    """Wait for zero replicas, wake the model with one request: its parts (s)."""
    assert wait_until(lambda: not replicas(state_dir), timeout_s=IDLE_S * 6, interval_s=2.0), (
        "the model did not go to zero replicas"
    )
    sent, first, header = first_token(base_url, max_tokens)
    [replica] = replicas(state_dir)
    listening, ready = neuron_times(Path(replica["log"]))
    times = [sent, replica["created_at"], replica["placed_at"], listening, ready]
    times += [replica["ready_at"], first]
    parts = {name: b - a for name, a, b in zip(PARTS, times, times[1:], strict=False)}
    parts["total"] = first - sent
    parts["header"] = (header or 0) / 1000
    print("  " + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()), flush=True)
    return parts


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=3)
    args = cli.parse_args(argv)
    rounds = 1 if args.smoke else args.rounds
    # A fresh state directory each run (up's state sits beside its log).
    log = Path(tempfile.mkdtemp(prefix="neuraxis-cold-start-")) / "up.log"
    deployment = log.with_name("deployment.toml")
    deployment.write_text(spec(args.smoke))
    up = start_up(log, extra=["--deployment", str(deployment)])
    measured: list[dict[str, float]] = []
    try:
        print(f"starting neuraxis up (log: {log}) ...", flush=True)
        wait_http_ready(up.proc, f"{up.base_url}/readyz", ENGINE_START_TIMEOUT_S)
        for n in range(rounds):
            print(f"round {n + 1} of {rounds}:", flush=True)
            measured.append(one_round(up.base_url, up_state_dir(log), 4))
    finally:
        up.proc.stop()
    names = [*PARTS, "total", "header"]
    summary = {name: median(m[name] for m in measured) for name in names}
    rows = [
        [name, f"{summary[name]:.2f}", f"{100 * summary[name] / summary['total']:.0f} %"]
        for name in PARTS
    ]
    rows.append(["request to first token", f"{summary['total']:.2f}", "100 %"])
    rows.append(["x-neuraxis-cold-start-ms", f"{summary['header']:.2f}", ""])
    table = markdown_table(["part (median of rounds)", "seconds", "share"], rows)
    print(table, flush=True)
    report = f"# Cold start from zero replicas\n\n{table}"
    summary_json = {"rounds": measured, "median": summary}
    write_results(output_path(args, "cold_start.json"), "cold_start", report, summary_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
