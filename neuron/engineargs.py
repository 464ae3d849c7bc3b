"""`neuraxis neuron serve --print-engine-args`: the vLLM engine arguments and
environment a neuron would start with, as JSON, without starting anything.

The generation is the configured one (`--generation`, or `generation` in
neuron.toml) without any detection; with "auto", NVML's (cpu where there is no
GPU), as `serve` does. A bundled model is located in the cache, not prepared.
The arguments come from the same functions the engine starts from
(neuron/main.py's `vllm_options`, neuron/engine/vllm/args.py's
`engine_launch`).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from axon.generations import EXIT_WRONG_GPU, Generation, UnsupportedGpuError
from axon.neuron_settings import NeuronSettings
from neuron.engine.vllm.args import engine_launch
from neuron.gpu import detect, host_generation
from neuron.main import resolve_model, vllm_options

# A usage error, as the command line's own (the sim engine has no vLLM arguments).
EXIT_USAGE = 2


def configured_generation(settings: NeuronSettings, nvml: Any | None) -> Generation:
    """The generation to print for: the configured one, else the host's."""
    if settings.generation != "auto":
        return Generation(settings.generation)
    return host_generation(detect(nvml))


def print_engine_args(settings: NeuronSettings, nvml: Any | None, out: TextIO) -> int:
    """Print the arguments; the exit status is serve's for the same refusal."""
    if settings.engine != "vllm":
        print("neuron: --print-engine-args needs the vllm engine", file=sys.stderr)
        return EXIT_USAGE
    try:
        generation = configured_generation(settings, nvml)
        options = vllm_options(settings, resolve_model(settings, prepare_bundled=False))
        launch = engine_launch(options, generation)
    except UnsupportedGpuError as e:
        print(f"neuron: {e}", file=sys.stderr)
        return EXIT_WRONG_GPU
    out.write(json.dumps(launch.as_json(generation), indent=2, sort_keys=True) + "\n")
    return 0
