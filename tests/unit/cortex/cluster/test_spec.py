from __future__ import annotations

import pytest

from axon.generations import Generation
from cortex.cluster.spec import SpecError, parse_spec
from cortex.routing.factory import PolicyName

GOOD = """
[[models]]
id = "chat"
source = "smollm2-135m-instruct"
replicas = 2
min_generation = "ada"
max_context = 2048
[models.engine]
kv_cache_dtype = "fp8"

[[models]]
id = "embed"
source = "/models/minilm"
task = "embed"
generations = ["cpu"]
"""


def test_a_valid_spec_parses() -> None:
    spec = parse_spec(GOOD, "deployment.toml")
    chat, embed = spec.models
    assert chat.replicas == 2
    assert chat.allowed_generations() == [
        Generation.ADA,
        Generation.HOPPER,
        Generation.BLACKWELL,
    ]
    assert chat.gpus_per_replica() == 1
    assert chat.engine.kv_cache_dtype == "fp8"
    assert embed.allowed_generations() == [Generation.CPU]
    assert embed.gpus_per_replica() == 0
    assert spec.model("embed") is embed
    assert spec.routing() == {}


def test_a_model_may_name_its_routing_policy() -> None:
    spec = parse_spec(GOOD.replace("max_context = 2048", 'routing = "prefix_affinity"'), "d.toml")
    assert spec.routing() == {"chat": PolicyName.PREFIX_AFFINITY}
    assert spec.models[1].routing is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # An unknown key inside the second model's engine table: its line.
        (
            '[[models]]\nid = "a"\nsource = "x"\ngenerations = ["cpu"]\n\n'
            '[[models]]\nid = "b"\nsource = "x"\ngenerations = ["ada"]\n'
            '[models.engine]\nkv_cache_dtyp = "fp8"\n',
            "deployment.toml: line 11: models.1.engine.kv_cache_dtyp: Extra inputs",
        ),
        (
            '[[models]]\nid = "a"\nsource = "x"\ngenerations = ["volta"]\n',
            "deployment.toml: line 4: models.0.generations.0: Input should be",
        ),
        (
            '[[models]]\nid = "a"\nsource = "x"\nreplicas = -1\ngenerations = ["cpu"]\n',
            "line 4: models.0.replicas: Input should be greater than or equal to 0",
        ),
        # A missing requirement points at the model's table.
        (
            '# models\n[[models]]\nid = "a"\nsource = "x"\n',
            "line 2: models.0: give either 'generations' or 'min_generation'",
        ),
        (
            '[[models]]\nid = "a"\nsource = "x"\ngenerations = ["cpu", "ada"]\n',
            "'cpu' cannot be mixed with GPU generations",
        ),
        (
            '[[models]]\nid = "a"\nsource = "x"\ngenerations = ["cpu"]\ntensor_parallel_size = 2\n',
            "'tensor_parallel_size' must be 1 on cpu",
        ),
        (
            '[[models]]\nid = "a"\nsource = "x"\nmin_generation = "cpu"\n',
            "'min_generation' takes a GPU generation",
        ),
        (
            '[[models]]\nid = "a"\nsource = "x"\ngenerations = ["cpu"]\n'
            '[[models]]\nid = "a"\nsource = "y"\ngenerations = ["cpu"]\n',
            "model id 'a' appears twice",
        ),
        ('[[models]]\nid = "a"\nsource = \n', "deployment.toml: Invalid value (at line 3"),
        (
            '[[models]]\nid = "a"\nsource = "x"\ngenerations = ["cpu"]\nrouting = "sticky"\n',
            "line 5: models.0.routing: Input should be 'least_outstanding', 'power_of_two'",
        ),
    ],
)
def test_an_invalid_spec_is_refused_with_the_line_and_the_reason(text: str, expected: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec(text, "deployment.toml")
    assert expected in str(raised.value)
