"""`neuraxis up`: the embedded default on one machine. Prepares the bundled
models, then runs on a local Ray (neuraxis/embedded_ray.py) or, with
--static, without it (embedded_static.py), until Ctrl-C or SIGTERM. Its
options are generated from EmbeddedOptions (neuraxis/embedded.py)."""

from __future__ import annotations

import argparse
import time

from pydantic import ValidationError

from neuraxis.commands.shared import Help, Subparsers, UsageError, add_command, fail
from neuraxis.embedded import EmbeddedOptions
from neuraxis.options import add_settings_options, overrides

UP = Help(
    "start the embedded default: a neuron with the bundled model and cortex",
    "Prepare the bundled model, start a neuron (vLLM on the CPU) and cortex, and serve an "
    "OpenAI-compatible API until Ctrl-C or SIGTERM.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    up = add_command(sub, "up", UP)
    add_settings_options(up, EmbeddedOptions)
    return up


def run(args: argparse.Namespace) -> int:
    try:
        options = EmbeddedOptions(**overrides(args, EmbeddedOptions))
    except ValidationError as e:
        raise UsageError(str(e.errors()[0]["msg"]).removeprefix("Value error, ")) from e
    from cortex.cluster.spec import SpecError
    from neuraxis.console import quiet, say
    from neuraxis.embedded_deployment import bundled_sources, up_spec
    from neuraxis.supervisor import stop_on_signals
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.prepare import PrepareError, default_cache_dir, is_prepared, prepare_all

    cache_dir = options.cache_dir or default_cache_dir()
    try:
        spec = up_spec(options)  # an invalid --deployment is refused before anything starts
    except SpecError as e:
        return fail(e)
    models = bundled_sources(spec, options)
    started = time.monotonic()
    # Fetching and converting take a while and say so; a cache hit is one line.
    work = not all(is_prepared(cache_dir, BUNDLED_MODELS[m]) for m in models)
    try:
        prepare_all(cache_dir, models, say if work or options.verbose else quiet)
    except PrepareError as e:
        return fail(e)
    if models:
        say(f"models prepared in {time.monotonic() - started:.1f} s ({', '.join(models)})")
    stop_on_signals()
    if options.static:
        from neuraxis.embedded_static import run_static

        return run_static(options, cache_dir)
    from neuraxis.embedded_ray import run_on_ray

    return run_on_ray(options, cache_dir, spec)
