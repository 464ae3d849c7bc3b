"""The replicas of `neuraxis up` serve at the default CPU priority: Ray starts
its workers at niceness 15, and a neuron that inherited it (with its engine
core and model worker) lost the CPU to every other busy process on the host,
where vLLM's own server runs at 0 (issue 17: process placement)."""

from __future__ import annotations

import os

import psutil

from harness.stacks import Stack


def test_every_neuron_and_its_engine_run_at_niceness_zero(stack: Stack) -> None:
    tree = psutil.Process(stack.proc.popen.pid).children(recursive=True)
    neurons = [p for p in tree if "neuron serve" in " ".join(p.cmdline())]
    assert len(neurons) == 2, [p.cmdline() for p in tree]  # the chat and embedding replicas
    serving = neurons + [c for n in neurons for c in n.children(recursive=True)]
    assert len(serving) > len(neurons)  # their engine cores (and model workers) too
    assert {p.pid: os.getpriority(os.PRIO_PROCESS, p.pid) for p in serving} == {
        p.pid: 0 for p in serving
    }
