"""The engine settings vLLM actually runs with, resolved by vLLM itself.

`python -m harness.vllm_config kwargs '<AsyncEngineArgs keywords as JSON>'` (how the
neuron builds its engine: vLLM's library defaults) or `python -m harness.vllm_config
serve '<vllm serve's arguments as a JSON list>'` (parsed by vLLM's own server
parser, with its server defaults: the two differ by usage context) prints the
effective settings as one JSON object. It runs as a
child process so that the benchmark itself never imports vLLM; the environment
(VLLM_CPU_KVCACHE_SPACE) is the caller's.

`resolve` is how bench/vs_vllm.py calls it; the keys it compares both sides on
are `COMPARED`.
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


def resolve(how: str, given: Any, env: dict[str, str]) -> dict[str, Any]:
    """`effective` in a child process with `env` added to the environment."""
    done = subprocess.run(
        [sys.executable, "-m", "harness.vllm_config", how, json.dumps(given)],
        cwd=REPO,
        env={**child_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"resolving vLLM's settings failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    print(json.dumps(effective(sys.argv[1], json.loads(sys.argv[2])), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
