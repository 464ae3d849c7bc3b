"""The neuron pool's settings (cortex's [pool]): how it watches its
neurons, how often it retries, and how it streams tokens from them. The
pool (pool.py) takes them as its constructor's arguments; cortex/app.py
passes them on and makes the pool's clients by `token_stream`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from axon.settings import SettingsGroup

# How generated tokens come from a neuron: one gRPC call per request (the
# default), or one long-lived stream per neuron carrying every request's
# deltas of an engine step in one message (Neuron.Session, issue 29).
TokenStream = Literal["per-request", "batched"]


class PoolSettings(SettingsGroup):
    """How the neuron pool watches its neurons, retries and streams tokens."""

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
        0.5,
        description="how often each ready neuron's engine load is polled (s); one idle at "
        "its last report and holding none of this process's requests, every 1.5 s at most",
    )
    max_retries: NonNegativeInt = Field(
        2, description="attempts on other neurons when one fails before the first token"
    )
    token_stream: TokenStream = Field(
        "per-request",
        description="how tokens come from the neurons: per-request (one gRPC stream a request, "
        "one message a token) or batched (one stream a neuron for all of this process's "
        "requests, one message per engine step; opt-in until measured)",
    )
