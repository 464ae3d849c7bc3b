"""vLLM server flags from the neuron's resolved settings: every compared
setting stated, booleans as vLLM's --x / --no-x switches."""

from __future__ import annotations

from harness.vllm_config import COMPARED, serve_args

SETTINGS = {
    "dtype": "float32",
    "max_model_len": 8192,
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 128,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": False,
    "enforce_eager": True,
    "kv_cache_dtype": "auto",
    "async_scheduling": False,
}


def test_every_compared_setting_becomes_a_flag() -> None:
    args = serve_args("/models/m", "m", SETTINGS)
    assert args[:4] == ["--model", "/models/m", "--served-model-name", "m"]
    for flag, value in (
        ("--dtype", "float32"),
        ("--max-model-len", "8192"),
        ("--max-num-batched-tokens", "2048"),
        ("--max-num-seqs", "128"),
        ("--kv-cache-dtype", "auto"),
    ):
        assert args[args.index(flag) + 1] == value
    assert "--enable-prefix-caching" in args
    assert "--no-enable-chunked-prefill" in args
    assert "--no-async-scheduling" in args
    assert "--enforce-eager" in args
    assert set(SETTINGS) == set(COMPARED)


def test_a_compiled_engine_gets_no_eager_flag() -> None:
    assert "--enforce-eager" not in serve_args("/m", "m", {**SETTINGS, "enforce_eager": False})
