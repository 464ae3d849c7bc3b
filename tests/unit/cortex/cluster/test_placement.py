from __future__ import annotations

from axon.generations import GENERATION_LABEL, Generation
from cortex.cluster.placement import (
    NodeView,
    eligibility,
    label_selector,
    preferred_node,
    unplaceable_reason,
)
from cortex.cluster.spec import ModelSpec


def _model(**fields: object) -> ModelSpec:
    return ModelSpec.model_validate({"id": "m", "source": "s", **fields})


def _node(generation: Generation | None, gpus: int = 1, alive: bool = True) -> NodeView:
    name = generation.value if generation else "none"
    return NodeView(f"id-{name}", "10.0.0.1", generation, gpus, alive)


CLUSTER = [_node(Generation.AMPERE), _node(Generation.ADA), _node(Generation.BLACKWELL, 2)]


def test_the_label_selector_names_the_eligible_generations() -> None:
    selector = label_selector([Generation.ADA, Generation.BLACKWELL])
    assert selector == {GENERATION_LABEL: "in(ada,blackwell)"}


def test_a_generation_that_lacks_an_option_is_not_eligible() -> None:
    model = _model(generations=["ampere", "ada"], engine={"kv_cache_dtype": "fp8"})
    elig = eligibility(model)
    assert elig.generations == [Generation.ADA]
    assert "KV-cache dtype 'fp8' is not available on ampere" in elig.refused[Generation.AMPERE]


def test_a_model_only_its_refused_generations_allow_is_unplaceable() -> None:
    model = _model(generations=["ampere"], engine={"kv_cache_dtype": "fp8"})
    reason = unplaceable_reason(model, CLUSTER)
    assert reason is not None and "'fp8' is not available on ampere" in reason


def test_no_node_of_an_allowed_generation() -> None:
    reason = unplaceable_reason(_model(generations=["hopper"]), CLUSTER)
    assert reason == (
        "no node of generation hopper in the cluster (generations present: ada, ampere, blackwell)"
    )


def test_a_dead_node_does_not_count() -> None:
    nodes = [_node(Generation.ADA, alive=False)]
    reason = unplaceable_reason(_model(min_generation="ada"), nodes)
    assert reason is not None and "generations present: none" in reason


def test_not_enough_gpus_on_any_one_node() -> None:
    reason = unplaceable_reason(_model(min_generation="ada", tensor_parallel_size=4), CLUSTER)
    assert reason == "a replica needs 4 GPUs on one ada, hopper, blackwell node; the largest has 2"


def test_a_satisfiable_model_has_no_reason() -> None:
    assert unplaceable_reason(_model(min_generation="ada", tensor_parallel_size=2), CLUSTER) is None
    assert unplaceable_reason(_model(generations=["cpu"]), [_node(Generation.CPU, 0)]) is None


def test_the_next_replica_prefers_a_node_without_one() -> None:
    model = _model(min_generation="ada")
    # Nothing placed: the least loaded eligible node (ids break ties).
    assert preferred_node(model, CLUSTER, {}) == "id-ada"
    assert preferred_node(model, CLUSTER, {"id-ada": ["m"]}) == "id-blackwell"
    assert preferred_node(model, CLUSTER, {"id-ada": ["other", "other"]}) == "id-blackwell"
    # Every eligible node holds one: no preference (Ray spreads them).
    assert preferred_node(model, CLUSTER, {"id-ada": ["m"], "id-blackwell": ["m"]}) is None
    # A node whose GPUs our replicas already hold has no room.
    assert preferred_node(model, CLUSTER, {}, used_gpus={"id-ada": 1}) == "id-blackwell"
    # A node where a replica just died is not preferred.
    assert preferred_node(model, CLUSTER, {}, avoid=frozenset({"id-ada"})) == "id-blackwell"
    # Too few GPUs, or dead: not a candidate.
    big = _model(min_generation="ada", tensor_parallel_size=2)
    assert preferred_node(big, CLUSTER, {}) == "id-blackwell"
    dead = [_node(Generation.ADA, alive=False)]
    assert preferred_node(model, dead, {}) is None
