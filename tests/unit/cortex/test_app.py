"""The app factory's wiring of mutual TLS: the neurons cortex is configured
with and the ones a cluster's endpoint table brings in are reached over the
configured TLS."""

from __future__ import annotations

import sys
from pathlib import Path

from cortex.api.gateway import gateway_of_app
from cortex.app import SWITCH_INTERVAL_S, create_app, make_pool
from cortex.config import ControllerSettings, CortexSettings, RaySettings, StoreSettings
from cortex.routing.factory import PolicyName, RoutingSettings
from cortex.routing.pool import NeuronPool
from harness.tls import files, tls_neuron
from neuraxis.tls import init_cluster_tls
from tests.unit.cortex.api.fakes import client


def _tls_settings(directory: Path, neurons: list[str]) -> CortexSettings:
    return CortexSettings(
        neurons=neurons,
        tls_ca=directory / "ca.crt",
        tls_cert=directory / "cortex.crt",
        tls_key=directory / "cortex.key",
        store=StoreSettings(state_dir=directory / "state"),
    )


async def test_static_neurons_are_reached_over_tls(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    async with tls_neuron(files(tmp_path, "neuron")) as address:
        pool: NeuronPool = make_pool(_tls_settings(tmp_path, [address]), None)
        await pool.refresh()
        try:
            assert list(pool.served_models()) == ["m"]
        finally:
            await pool.stop()


async def test_neurons_of_the_endpoint_table_are_reached_over_tls(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    async with tls_neuron(files(tmp_path, "neuron")) as address:
        pool: NeuronPool = make_pool(_tls_settings(tmp_path, []), None)
        try:
            await pool.update([address])  # polls the new neuron at once
            assert list(pool.served_models()) == ["m"]
        finally:
            await pool.stop()


def test_the_deployment_specs_routing_chooses_each_models_policy(tmp_path: Path) -> None:
    spec = tmp_path / "deployment.toml"
    spec.write_text(
        '[[models]]\nid = "chat"\nsource = "x"\ngenerations = ["cpu"]\n'
        'routing = "prefix_affinity"\n'
        '[[models]]\nid = "other"\nsource = "y"\ngenerations = ["cpu"]\n'
        'routing = "prefix_affinity"\n'
        '[[models]]\nid = "plain"\nsource = "z"\ngenerations = ["cpu"]\n'
    )
    settings = CortexSettings(
        ray=RaySettings(address="127.0.0.1:1"),  # cluster mode; Ray is joined at start
        controller=ControllerSettings(deployment=spec),
        routing=RoutingSettings(
            policy=PolicyName.POWER_OF_TWO, models={"other": PolicyName.LEAST_OUTSTANDING}
        ),
        store=StoreSettings(state_dir=tmp_path / "state"),
    )
    app = create_app(settings)  # the spec is read as the app is made
    pool = gateway_of_app(app).neurons
    assert isinstance(pool, NeuronPool)
    assert pool.policy("chat").name == "prefix_affinity"  # the spec's
    assert pool.policy("other").name == "least_outstanding"  # cortex's per-model wins
    assert pool.policy("plain").name == "power_of_two"  # cortex's default


def test_a_started_cortex_takes_the_gil_back_from_worker_threads_every_millisecond() -> None:
    # Large answers and bodies are built in worker threads; the loop's
    # thread waits for the GIL at most one switch interval per turn.
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        test_client, _ = client([])
        with test_client:
            assert sys.getswitchinterval() == SWITCH_INTERVAL_S == 0.001
    finally:
        sys.setswitchinterval(before)
