"""The spec entries the cluster tests write parse as cortex reads a
deployment spec, with the replicas and generations they say."""

from __future__ import annotations

from axon.generations import Generation
from cortex.cluster.spec import parse_spec
from harness.sim_specs import autoscaled_spec, pinned_replica_spec, sim_replicas_spec


def test_replicas_on_ada_or_newer_with_the_sim_timings() -> None:
    (model,) = parse_spec(sim_replicas_spec("m", 3), "test").models
    assert (model.id, model.replicas, model.min_generation) == ("m", 3, Generation.ADA)
    assert (model.engine.kind, model.engine.sim_ttft_s, model.engine.sim_itl_s) == (
        "sim",
        0.05,
        0.02,
    )


def test_pinned_entries_follow_one_another_with_their_engine_lines() -> None:
    text = pinned_replica_spec("a", "hopper") + pinned_replica_spec(
        "b", "ampere", 'kv_cache_dtype = "fp8"'
    )
    a, b = parse_spec(text, "test").models
    assert (a.id, a.replicas, a.generations) == ("a", 1, [Generation.HOPPER])
    assert (b.id, b.generations, b.engine.kv_cache_dtype) == ("b", [Generation.AMPERE], "fp8")


def test_autoscaled_entries_on_cpu_with_their_autoscale_and_engine_lines() -> None:
    text = autoscaled_spec("a", "min_replicas = 1\nmax_replicas = 4") + autoscaled_spec(
        "b", "min_replicas = 0\nmax_replicas = 1", engine="sim_load_s = 1.0"
    )
    a, b = parse_spec(text, "test").models
    assert (a.id, a.generations, a.engine.sim_ttft_s, a.engine.sim_itl_s) == (
        "a",
        [Generation.CPU],
        0.05,
        0.02,
    )
    assert a.autoscale is not None and b.autoscale is not None
    assert (a.autoscale.min_replicas, a.autoscale.max_replicas) == (1, 4)
    assert (b.autoscale.min_replicas, b.engine.sim_load_s) == (0, 1.0)
