"""The engine settings vLLM actually runs with, resolved by vLLM itself.

`python -m harness.vllm_config '<AsyncEngineArgs keywords as JSON>' SERVED_ID`
resolves the neuron's engine keywords (how the neuron builds its engine: vLLM's
library defaults), turns them into `vllm serve` flags (`serve_args`) and
resolves those with vLLM's own server parser and server defaults (the two
differ by usage context); it prints both sides' effective settings and the
flags as one JSON object. It runs as a child process so that the benchmark
itself never imports vLLM; the environment (VLLM_CPU_KVCACHE_SPACE) is the
caller's.

`matched_in_child` is how bench/vs_vllm.py calls it; the keys it compares both
sides on are `COMPARED`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from harness.procs import REPO, child_env

# The settings both sides must share for the comparison to be fair.
COMPARED = (
    "dtype",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "enforce_eager",
    "kv_cache_dtype",
    "async_scheduling",
)


def engine_args(how: str, given: Any) -> Any:
    """`AsyncEngineArgs` as the neuron makes them (keywords) or as vLLM's
    server parses its command line (so a misspelt flag fails here)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    if how == "kwargs":
        return AsyncEngineArgs(**given)
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli = make_arg_parser(FlexibleArgumentParser())
    return AsyncEngineArgs.from_cli_args(cli.parse_args(given))


def effective(how: str, given: Any) -> dict[str, Any]:
    """vLLM's resolved configuration: the neuron's AsyncLLM runs in the engine
    context, vLLM's server in its own (whose defaults may differ)."""
    from vllm.usage.usage_lib import UsageContext

    usage = UsageContext.ENGINE_CONTEXT if how == "kwargs" else UsageContext.OPENAI_API_SERVER
    config = engine_args(how, given).create_engine_config(usage)
    model, scheduler, cache = config.model_config, config.scheduler_config, config.cache_config
    return {
        "dtype": str(model.dtype).removeprefix("torch."),
        "max_model_len": model.max_model_len,
        "max_num_batched_tokens": scheduler.max_num_batched_tokens,
        "max_num_seqs": scheduler.max_num_seqs,
        "enable_prefix_caching": bool(cache.enable_prefix_caching),
        "enable_chunked_prefill": bool(scheduler.enable_chunked_prefill),
        "enforce_eager": bool(model.enforce_eager),
        "kv_cache_dtype": cache.cache_dtype,
        "async_scheduling": bool(scheduler.async_scheduling),
    }


def serve_args(model_path: str, served_id: str, settings: dict[str, Any]) -> list[str]:
    """vLLM server flags that reproduce the neuron's resolved `settings`
    (harness/vllm_config.py's keys), each stated even where it is the server's
    default, so that a change of vLLM's defaults cannot skew the comparison."""

    def switch(name: str, on: bool) -> str:
        return f"--{name}" if on else f"--no-{name}"

    return [
        "--model",
        model_path,
        "--served-model-name",
        served_id,
        "--dtype",
        str(settings["dtype"]),
        "--kv-cache-dtype",
        str(settings["kv_cache_dtype"]),
        "--max-model-len",
        str(settings["max_model_len"]),
        "--max-num-batched-tokens",
        str(settings["max_num_batched_tokens"]),
        "--max-num-seqs",
        str(settings["max_num_seqs"]),
        switch("enable-prefix-caching", bool(settings["enable_prefix_caching"])),
        switch("enable-chunked-prefill", bool(settings["enable_chunked_prefill"])),
        switch("async-scheduling", bool(settings["async_scheduling"])),
        *(["--enforce-eager"] if settings["enforce_eager"] else []),
    ]


def matched(kwargs: dict[str, Any], served_id: str) -> dict[str, Any]:
    """The neuron's settings as vLLM resolves them, the server flags that
    reproduce them, and those flags as vLLM's server resolves them: one
    process, one import of vLLM (each took ~30 s of CPU here)."""
    ours = effective("kwargs", kwargs)
    flags = serve_args(str(kwargs["model"]), served_id, ours)
    return {"ours": ours, "flags": flags, "theirs": effective("serve", flags)}


def matched_in_child(
    kwargs: dict[str, Any], served_id: str, env: dict[str, str]
) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """`matched` in a child process with `env` added to the environment:
    (server flags, our settings, the server's settings)."""
    done = subprocess.run(
        [sys.executable, "-m", "harness.vllm_config", json.dumps(kwargs), served_id],
        cwd=REPO,
        env={**child_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"resolving vLLM's settings failed:\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found["flags"], found["ours"], found["theirs"]


def main() -> int:
    print(json.dumps(matched(json.loads(sys.argv[1]), sys.argv[2]), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
