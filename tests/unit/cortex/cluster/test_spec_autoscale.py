"""`[models.autoscale]` in the deployment spec: defaults, and the
contradictions refused with their line."""

from __future__ import annotations

import pytest

from cortex.cluster.spec import DEFAULT_SCALE_TO_ZERO_S, SpecError, parse_spec

MODEL = '[[models]]\nid = "chat"\nsource = "sim"\nmin_generation = "ada"\n'


def test_a_model_without_the_table_keeps_its_fixed_replicas() -> None:
    [model] = parse_spec(MODEL + "replicas = 3\n", "d.toml").models
    assert model.autoscale is None
    assert model.replicas == 3


def test_the_table_defaults_and_the_starting_count() -> None:
    [model] = parse_spec(MODEL + "[models.autoscale]\nmax_replicas = 4\n", "d.toml").models
    scale = model.autoscale
    assert scale is not None
    assert (scale.min_replicas, scale.max_replicas, scale.target_in_flight) == (1, 4, None)
    assert scale.scale_down_after_s >= 60  # minutes, not seconds
    assert model.replicas == 1  # starts at min_replicas unless `replicas` says
    [started] = parse_spec(
        MODEL + "replicas = 2\n[models.autoscale]\nmax_replicas = 4\n", "d.toml"
    ).models
    assert started.replicas == 2


def test_scale_to_zero_defaults_to_a_long_idle() -> None:
    text = MODEL + "[models.autoscale]\nmin_replicas = 0\nmax_replicas = 2\n"
    [model] = parse_spec(text, "d.toml").models
    assert model.replicas == 0
    assert model.autoscale is not None
    assert model.autoscale.idle_after_s() == DEFAULT_SCALE_TO_ZERO_S
    [quick] = parse_spec(text + "scale_to_zero_after_s = 60\n", "d.toml").models
    assert quick.autoscale is not None and quick.autoscale.idle_after_s() == 60


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (
            "[models.autoscale]\nmin_replicas = 3\nmax_replicas = 2\n",
            "d.toml: line 5: models.0.autoscale: min_replicas (3) is above max_replicas (2)",
        ),
        (
            "replicas = 5\n[models.autoscale]\nmax_replicas = 2\n",
            "d.toml: line 5: models.0.replicas: replicas = 5 is outside autoscale's 1..2",
        ),
        (
            "[models.autoscale]\nmax_replicas = 2\nscale_to_zero_after_s = 60\n",
            "d.toml: line 5: models.0.autoscale: scale_to_zero_after_s needs min_replicas = 0",
        ),
        (
            "[models.autoscale]\nmax_replicas = 2\ntarget_in_flight = 0\n",
            "d.toml: line 7: models.0.autoscale.target_in_flight: Input should be greater than 0",
        ),
        (
            "[models.autoscale]\nmin_replicas = 0\n",
            "d.toml: line 5: models.0.autoscale.max_replicas: Field required",
        ),
    ],
)
def test_contradictions_are_refused_with_their_line(tail: str, expected: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(MODEL + tail, "d.toml")
    assert str(refused.value) == expected
