"""The neuron pool's settings (cortex's [pool]): how it watches its
neurons and how often it retries. The pool (pool.py) takes them as its
constructor's arguments; cortex/app.py passes them on."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from axon.settings import SettingsGroup


class PoolSettings(SettingsGroup):
    """How the neuron pool watches its neurons and retries."""

    poll_interval_s: PositiveFloat = Field(
        1.0,
        description="how often each neuron's Info is polled for readiness and models (s)",
    )
    health_timeout_s: PositiveFloat = Field(
        1.0,
        description="how long a neuron's Info poll may take before it counts as missed (s)",
    )
    health_misses: PositiveInt = Field(
        2,
        description="Info polls in a row that may miss their deadline before the neuron counts "
        "as not answering: out of rotation, and its requests in flight abandoned (a refused "
        "connection counts at once)",
    )
    load_interval_s: PositiveFloat = Field(
        0.5, description="how often each ready neuron's engine load is polled (s)"
    )
    max_retries: NonNegativeInt = Field(
        2, description="attempts on other neurons when one fails before the first token"
    )
