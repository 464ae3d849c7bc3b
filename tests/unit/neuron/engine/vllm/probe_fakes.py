"""A stand-in for the grammar probe's compile (an xgrammar compile's time
depends on the machine): built in the probe's child process from the path
of a marker file."""

from __future__ import annotations

import time
from pathlib import Path

from neuron.engine.vllm.grammar_probe import Compile


def held_compiler(release: str) -> Compile:
    """A compile of a spec containing "held" makes `release`.started and ends
    once the file `release` exists; "fail" raises; any other ends at once."""

    def compile_(kind: str, spec: str) -> None:
        if spec == "fail":
            raise ValueError("not a grammar")
        if "held" not in spec:
            return
        Path(f"{release}.started").touch()
        while not Path(release).exists():
            time.sleep(0.01)

    return compile_
